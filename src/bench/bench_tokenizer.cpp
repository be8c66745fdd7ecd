// `loom bench tokenizer --tokenizer tokenizer.json [--text FILE] [--mb N]`:
// encoding speed of a Hugging Face byte-level BPE tokenizer on one core,
// loom's against the `tokenizers` library's (the project's .venv python,
// LOOM_HF_PYTHON to name another) on the same text in the same run, and
// whether the ids agree.
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/command_util.h"
#include "cli/commands.h"
#include "core/check.h"
#include "core/regular_file.h"
#include "data/hf_bpe_tokenizer.h"
#include "kernels/cpu/isa.h"

namespace loom::cli {

int cmd_bench_tokenizer(const Args& args) {
  std::string tokenizer, text_path = LOOM_SOURCE_DIR "/data/sample/kjv.txt";
  double mb = 1;
  for (size_t i = 1; i < args.size(); i++) {
    auto value = [&](const char* flag) {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench tokenizer: %s needs a value", flag);
      return args[++i];
    };
    if (args[i] == "--tokenizer") tokenizer = value("--tokenizer");
    else if (args[i] == "--text") text_path = value("--text");
    else if (args[i] == "--mb") {
      const std::string v = value("--mb");
      char* end = nullptr;
      mb = std::strtod(v.c_str(), &end);
      LOOM_USER_CHECK(end && *end == '\0' && !v.empty(), "bench tokenizer: --mb must be a number, got '%s'", v.c_str());
    }
    else throw UserError(strprintf("bench tokenizer: unknown option '%s' (try loom bench --help)", args[i].c_str()));
  }
  LOOM_USER_CHECK(!tokenizer.empty(), "bench tokenizer: --tokenizer tokenizer.json is needed");
  LOOM_USER_CHECK(mb > 0 && mb <= 1024, "bench tokenizer: --mb must be in (0, 1024]");
  require_regular_file(text_path, "bench tokenizer: --text");
  std::ifstream in(text_path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str().substr(0, size_t(mb * (1 << 20)));
  // Whole lines only (the library's side reads lines too).
  text = text.substr(0, text.rfind('\n') + 1);
  const std::string cut = "/tmp/loom-bench-tokenizer-text.txt";
  std::ofstream(cut, std::ios::binary) << text;

  std::printf("loom bench tokenizer: %s on %.2f MB of %s, one core\n%s\n", tokenizer.c_str(),
              double(text.size()) / 1e6, text_path.c_str(), cpu::describe_dispatch().line().c_str());
  const HfBpeTokenizer tok = HfBpeTokenizer::load(tokenizer);
  const auto t0 = std::chrono::steady_clock::now();
  size_t ids = 0;
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) ids += tok.encode(line).size();
  const double loom_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("loom        %8.2f MB/s  %zu ids\n", double(text.size()) / 1e6 / loom_s, ids);

  const char* py_env = std::getenv("LOOM_HF_PYTHON");
  const std::string py = py_env && *py_env ? py_env : LOOM_SOURCE_DIR "/.venv/bin/python";
  const std::string script =
      "import json,sys,time\n"
      "from tokenizers import Tokenizer\n"
      "t=Tokenizer.from_file(sys.argv[1]); lines=open(sys.argv[2],encoding='utf-8').read().split('\\n')[:-1]\n"
      "s=time.perf_counter(); n=sum(len(t.encode(l, add_special_tokens=False).ids) for l in lines)\n"
      "d=time.perf_counter()-s; print(json.dumps({'mb_per_s': sum(len(l.encode())+1 for l in lines)/1e6/d, 'ids': n}))\n";
  std::ofstream("/tmp/loom-bench-tokenizer.py") << script;
  const std::string json = run_for_json("OMP_NUM_THREADS=1 RAYON_NUM_THREADS=1 '" + py +
                                        "' /tmp/loom-bench-tokenizer.py '" + tokenizer + "' '" + cut + "' 2>&1");
  const double lib = json_number(json, "mb_per_s");
  if (lib > 0)
    std::printf("tokenizers  %8.2f MB/s  %.0f ids%s\nloom / tokenizers: %.2fx\n", lib, json_number(json, "ids"),
                size_t(json_number(json, "ids")) == ids ? " (the same count)" : " (a different count!)",
                double(text.size()) / 1e6 / loom_s / lib);
  else
    std::printf("tokenizers  not run (%s cannot run it)\n", py.c_str());
  return 0;
}

}  // namespace loom::cli
