// The text that `loom prepare` reads: documents, each one UTF-8 file.
//
// The input is a folder (every regular file under it, recursively, in name
// order; hidden names are skipped) or one file, which is cut at line ends
// into documents of about 64 KiB (a .jsonl file: a 64th of it, at most 64
// KiB) so that it, too, can be split by document.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

struct Document {
  std::string name;  // path relative to the input folder; "FILE#n" for part n of a single file
  std::string text;
  uint64_t hash = 0;  // content_hash(name and text)
  std::string file;         // the file it came from, as shown in messages
  uint64_t first_line = 1;  // of that file (a single file is cut at line ends)
};

struct Corpus {
  std::string path;  // as given
  std::vector<Document> documents;
  uint64_t bytes = 0;
};

// Throws UserError naming the path if it is missing or unreadable, holds no
// text, or a file is not valid UTF-8 (with the byte offset).
Corpus read_corpus(const std::string& path);

// Train / validation split by document, deterministic: documents in the
// order of a hash of their names go to validation until it holds
// val_fraction of the bytes (at least one document, never all of them).
struct CorpusSplit {
  std::vector<const Document*> train, val;  // each in corpus order
};
// Throws UserError naming the input if it has fewer than two documents.
CorpusSplit split_corpus(const Corpus& corpus, double val_fraction);

// The byte offset of the first invalid UTF-8 sequence, or npos.
size_t find_invalid_utf8(std::string_view text);

}  // namespace loom
