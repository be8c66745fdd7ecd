// `loom generate`: sample text from a checkpoint, single process.
//
// The model is rebuilt from the manifest's model section and filled with the
// global parameters (whatever layout saved them); the tokenizer is the run's
// (data.format = "shards": the one <data.path>/dataset.toml names, loom's
// tokenizer.model or a Hugging Face tokenizer.json; "bytes": one token per
// byte), or --tokenizer's. No KV cache: each new token reruns the context (at most seq_len).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>

#include "checkpoint/checkpoint_model.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/model_fields.h"
#include "cli/commands.h"
#include "core/check.h"
#include "core/rng.h"
#include "data/chat_template.h"
#include "data/text_codec.h"
#include "model/moe/router_state.h"
#include "model/stage_module.h"
#include "model/sampling.h"
#include "train/trainer.h"

namespace loom::cli {
namespace {

// ---- The one place that knows the model class. ----------------------------

// A model for one sequence of up to cfg.seq_len tokens, holding the
// checkpoint's global parameters (a LoRA checkpoint's adapters on their base).
std::unique_ptr<StageModule> load_model(const CheckpointModel& source) {
  const ModelConfig& cfg = source.config();
  auto model = make_model(cfg, 1, cfg.seq_len);
  for (size_t i = 0; i < model->layout().params.size(); i++) {
    const ParamSpec& spec = model->layout().params[i];
    std::vector<float> values = source.read_global(spec.name);
    LOOM_CHECK(int64_t(values.size()) == spec.numel, "%s: %zu values, the model needs %lld", spec.name.c_str(),
               values.size(), (long long)spec.numel);
    std::copy(values.begin(), values.end(), model->param(int(i)));
  }
  // A mixture of experts routes with its balancing biases, as in training.
  if (moe::RouterState* router = model->router_state()) router->load_biases(source.checkpoint().tensors());
  return model;
}

TextCodec codec_for(const CheckpointManifest& m, const std::string& origin, const std::string& tokenizer_override) {
  TextCodec c;
  if (!tokenizer_override.empty()) {
    c.tokenizer = load_tokenizer(resolve_path(tokenizer_override));
    return c;
  }
  const RunData d = run_data(m, origin);
  return TextCodec::for_data(d.format, d.format == "bytes" ? d.path : resolve_path(d.path), origin);
}

double number(const std::string& s, const char* flag) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used == s.size() && std::isfinite(v)) return v;
  } catch (...) {
  }
  throw UserError(strprintf("generate: %s expects a number, got '%s'", flag, s.c_str()));
}

}  // namespace

int cmd_generate(const Args& args) {
  std::string checkpoint, prompt, tokenizer, chat_template, system, base;
  bool chat = false;
  float temperature = 0.8f;
  int top_k = 40, max_tokens = 100, threads = 0;
  int64_t seed = 1;
  bool prompt_given = false;
  for (size_t i = 0; i < args.size(); i++) {
    std::string a = args[i], inline_value;
    bool has_inline = false;
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos)
      inline_value = a.substr(eq + 1), a = a.substr(0, eq), has_inline = true;
    auto value = [&]() -> std::string {
      if (has_inline) return inline_value;
      LOOM_USER_CHECK(i + 1 < args.size(), "generate: %s needs a value", a.c_str());
      return args[++i];
    };
    auto integer = [&](int64_t lo, int64_t hi) {
      double v = number(value(), a.c_str());
      LOOM_USER_CHECK(v == std::floor(v) && v >= double(lo) && v <= double(hi), "generate: %s must be an integer in [%lld, %lld]",
                      a.c_str(), (long long)lo, (long long)hi);
      return int64_t(v);
    };
    if (a == "--checkpoint") checkpoint = value();
    else if (a == "--prompt") prompt = value(), prompt_given = true;
    else if (a == "--tokenizer") tokenizer = value();
    else if (a == "--base") base = value();
    else if (a == "--chat") chat = true;
    else if (a == "--chat-template") chat_template = value(), chat = true;
    else if (a == "--system") system = value(), chat = true;
    else if (a == "--temperature") {
      temperature = float(number(value(), "--temperature"));
      LOOM_USER_CHECK(temperature >= 0 && temperature <= 100, "generate: --temperature must be in [0, 100] (0 = greedy)");
    } else if (a == "--top-k") top_k = int(integer(0, 1 << 30));
    else if (a == "--max-tokens") max_tokens = int(integer(0, 1 << 20));
    else if (a == "--seed") seed = integer(0, int64_t(1) << 53);
    else if (a == "--threads") threads = int(integer(0, 1024));
    else throw UserError(strprintf("generate: unknown option '%s' (try loom generate --help)", a.c_str()));
  }
  LOOM_USER_CHECK(!checkpoint.empty(), "generate: --checkpoint DIR is required");
  LOOM_USER_CHECK(prompt_given, "generate: --prompt TEXT is required");
  set_threads(threads);

  ResumeChoice chosen = resolve_resume(checkpoint, "");
  Checkpoint ckpt = Checkpoint::open(chosen.dir);
  const std::string origin = "checkpoint '" + ckpt.dir() + "'";
  const CheckpointModel source(ckpt, base);
  const ModelConfig& cfg = source.config();
  TextCodec codec = codec_for(ckpt.manifest(), origin, tokenizer);
  std::unique_ptr<StageModule> model = load_model(source);
  if (cfg.lora.enabled())
    std::fprintf(stderr, "generate: LoRA adapters (rank %d) on the base %s\n", cfg.lora.rank, source.base_source().c_str());

  std::vector<int32_t> tokens;
  int stop = codec.eos();
  if (chat) {
    // The prompt as a user turn (after --system's), through the chat
    // template, with the assistant's header; the answer ends at end-of-turn.
    LOOM_USER_CHECK(codec.tokenizer != nullptr, "generate: --chat needs the run's tokenizer (byte-level data has none)");
    const TextTokenizer& tok = *codec.tokenizer;
    std::optional<ChatTemplate> t = chat_template.empty() ? recognise_chat_template(tok.chat_template())
                                                          : parse_chat_template(chat_template);
    LOOM_USER_CHECK(t.has_value(),
                    chat_template.empty()
                        ? "generate: --chat: the tokenizer has no chat_template loom recognises (give --chat-template "
                          "chatml, llama3, llama31, llama2 or mistral)"
                        : "generate: --chat-template must be chatml, llama3, llama31, llama2 or mistral");
    const std::string bos = tok.bos_id() >= 0 ? tok.decode({tok.bos_id()}) : "", eos = tok.decode({tok.eos_id()});
    std::vector<ChatMessage> messages;
    if (!system.empty()) messages.push_back({"system", system});
    messages.push_back({"user", prompt});
    const std::string chatml_system = recognise_chat_template(tok.chat_template()) == ChatTemplate::chatml
                                          ? chatml_default_system(tok.chat_template())
                                          : std::string(kQwen2DefaultSystem);
    std::vector<ChatSegment> segments = render_chat(*t, messages, bos, eos, chatml_system);
    segments.push_back({generation_prompt(*t), false});
    std::vector<TextSegment> views;
    for (const ChatSegment& x : segments) views.push_back({x.text, false});
    std::vector<uint8_t> unused;
    tok.encode_segments(views, &tokens, &unused);
    const std::vector<int32_t> turn_end = tok.encode(end_of_turn(*t, eos));
    LOOM_USER_CHECK(turn_end.size() == 1, "generate: the end-of-turn '%s' is not one token of the tokenizer",
                    end_of_turn(*t, eos).c_str());
    stop = turn_end[0];
    std::fprintf(stderr, "generate: chat template %s; the answer ends at %s\n", chat_template_name(*t),
                 end_of_turn(*t, eos).c_str());
    prompt.clear();  // only the answer is printed
  } else {
    tokens = codec.encode_prompt(prompt);
  }
  LOOM_USER_CHECK(!tokens.empty(), "generate: the prompt is empty");
  for (int32_t t : tokens)
    LOOM_USER_CHECK(t < cfg.vocab_size, "generate: the tokenizer gives id %d, beyond the model's vocabulary of %d", t,
                    cfg.vocab_size);
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  std::string printed;
  const auto t0 = std::chrono::steady_clock::now();
  SamplingOptions opt{max_tokens, temperature, top_k, uint64_t(seed), stop};
  const std::vector<int32_t> generated = sample_tokens(*model, tokens, opt, [&](const std::vector<int32_t>& so_far) {
    std::string text = codec.decode(so_far);  // decoded whole: pieces may split a UTF-8 character
    if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
      std::fwrite(text.data() + printed.size(), 1, text.size() - printed.size(), stdout);  // NUL bytes too
      std::fflush(stdout);
      printed = text;
    }
  });
  std::string text = codec.decode(generated);
  if (text != printed) {
    const size_t from = std::min(printed.size(), text.size());
    std::fwrite(text.data() + from, 1, text.size() - from, stdout);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n");
  std::fprintf(stderr, "generate: %zu tokens in %.2f s (%.1f tokens/s) from %s (step %lld)\n", generated.size(), s,
               s > 0 ? double(generated.size()) / s : 0.0, ckpt.dir().c_str(), (long long)ckpt.manifest().step);
  return 0;
}

}  // namespace loom::cli
