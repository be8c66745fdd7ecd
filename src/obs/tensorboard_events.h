// TensorBoard event files, written and read without TensorFlow or protobuf.
//
// A file is a sequence of records: uint64 length, uint32 masked CRC32C of
// the length, `length` bytes of a serialized tensorflow.Event, uint32 masked
// CRC32C of those bytes (little-endian). The first event names the format
// (file_version "brain.Event:2"); each later one holds one scalar:
//
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
//
// The writer encodes exactly these fields; the reader decodes them back (and
// checks both CRCs), for loom's tests.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace loom::obs {

// CRC-32C (Castagnoli), and the masked form TFRecord stores.
uint32_t crc32c(const void* data, size_t bytes);
uint32_t masked_crc32c(const void* data, size_t bytes);

class TensorBoardWriter {
 public:
  // Opens DIR/events.out.tfevents.<unix time>.<host>.<pid>.loom (TensorBoard finds
  // files by "tfevents" in the name) and writes the file_version event.
  // Throws UserError naming the file if it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One scalar event; NaN and infinite values are skipped (TensorBoard draws
  // them as gaps anyway). Buffered until flush().
  void scalar(const std::string& tag, int64_t step, double value, double wall_time);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);
  std::string path_;
  FILE* file_ = nullptr;
};

struct ScalarEvent {
  std::string tag;
  int64_t step = 0;
  float value = 0;
  double wall_time = 0;
};

struct EventFile {
  std::string file_version;          // of the first event
  std::vector<ScalarEvent> scalars;  // in file order
};

// Reads a file written by TensorBoardWriter (or any event file with scalar
// simple_values). Throws UserError naming the file and the record on a bad
// length, a CRC mismatch or a truncated record.
EventFile read_event_file(const std::string& path);

}  // namespace loom::obs
