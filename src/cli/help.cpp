#include <cstdio>
#include <sstream>
#include <string>

#include "cli/commands.h"

namespace loom::cli {
namespace {

// The whole usage, in the order `loom --help` prints it. A command's section
// starts at a line "  NAME  ..." (two spaces, the name) and runs to the next
// one; `loom NAME --help` prints that section alone.
constexpr const char* kUsage = R"(loom - train GPT-style language models

usage: loom <command> [options]

commands:
  prepare Make training data: corpus -> tokenizer (trained, or given) -> token shards.
            loom prepare                        the Debian corpus (scripts/fetch_corpus.sh) into .cache/data
            loom prepare --input DIR_OR_FILE --out DIR [options]
          Options:
            --input PATH        a folder of UTF-8 text files (one document each) or one file
                                (default .cache/corpus/text)
            --out DIR           where the tokenizer's files, train_*.bin, val_*.bin and dataset.toml go
                                (default .cache/data)
            --vocab-size N      BPE vocabulary to train (default 8192; byte fallback, exact round trip)
            --tokenizer PATH    use this tokenizer instead of training one: a SentencePiece .model,
                                or a Hugging Face folder (or its tokenizer.json) with a
                                byte-level BPE model (GPT-2, Llama 3, Qwen2): its files are
                                copied, each document is [BOS if it adds one] ids EOS
            --chat-template N   JSON Lines input (a .jsonl file or a folder of them): the chat
                                template for "messages" lines (chatml, llama3, llama31, llama2,
                                mistral; default: the tokenizer's chat_template, recognised)
            --val-fraction F    share of the text held out for validation, by document (default 0.02)
            --shard-tokens N    tokens per shard before a new one starts (default 16777216)
            --sample-mb M       text the tokenizer is trained on (default 24)
            --threads N         tokenizing threads (default 0 = all cores)
            --force             redo everything (otherwise work whose inputs did not change is skipped)
  train   Train a model.
            loom train                          the default job (small GPT on the prepared corpus)
            loom train --config configs/NAME.toml [--set section.key=value ...]
          Options:
            --config FILE     TOML run configuration (see configs/)
            --set KEY=VALUE   override one field, e.g. --set train.steps=100 --set runtime.threads=2
            --resume auto|DIR continue from the newest good checkpoint under train.checkpoint_dir
                              (auto; a damaged one is named and the previous one used; when every
                              one is damaged, exit 2 naming each, unless --resume auto-or-fresh,
                              which then starts afresh), or from DIR,
                              under any layout (dp, tp, pp, ZeRO may differ from the run that saved)
            --layout auto     let the planner (loom plan) choose dp, tp, pp, cp, ZeRO, micro-batch, recompute
            --cluster NAME    the cluster the run's own prediction (and --layout auto) is made for:
                              a configs/clusters preset or a cluster .toml (e.g. the emulated one
                              loom bench cluster writes); default: this machine's calibration
                              (loom bench calibrate; without it, a run takes one itself, once,
                              in .cache/calibration/: a single-rank run in a child process, a
                              launched one on rank 0 inside the run), as many nodes as it finds
            --fault SPEC      for tests and demos only: make a rank fail on purpose. SPEC is
                              kill:rank=R:step=S (SIGKILL as step S begins), stop:rank=R:step=S
                              (SIGSTOP: a hang), slow:rank=R:step=S:ms=M (M ms more compute per
                              step from step S: a straggler), pause:rank=R:step=S:ms=M (busy M ms
                              once: a long kernel or fsync, alive), kill-in-save:rank=R:step=S
                              (SIGKILL half-way through its checkpoint file of step S); steps as
                              logged
          Fields: [model] family ("gpt2" | "llama" | "mixtral") vocab_size n_layer n_head d_model seq_len
                          LLaMA only: n_kv_head (0 = n_head; grouped-query attention)
                          ffn_hidden (0 = 8/3 d_model rounded up to ffn_multiple_of, 256)
                          rope_theta (10000) norm_eps (1e-5) tie_embeddings (false)
                          qkv_bias (false; Qwen2's q/k/v biases) rope_scaling ("none" |
                          "llama3": Llama 3.1's, with rope_factor (8) rope_low_freq_factor (1)
                          rope_high_freq_factor (4) rope_original_max_positions (8192))
                          mixtral (LLaMA with a dropless top-k mixture-of-experts MLP): n_experts
                          (8) top_k (2) moe_ffn_hidden (0 = ffn_hidden) moe_every (1: every block)
                          moe_shared_ffn (0: no shared expert; else Qwen2-MoE's gated one)
                          moe_router ("softmax" | "sigmoid") moe_renormalize (true: the top-k
                          scores over their sum as weights)
                          moe_balance ("aux_free": per-expert selection biases moved by moe_bias_rate
                          (1e-3) from the global batch's counts | "sequence": a per-sequence loss
                          weighted moe_aux_coef (1e-3) | "switch": Mixtral's loss over a
                          micro-batch, pp = 1 | "none") moe_z_coef (0: no router z-loss)
                          attention ("auto": tiled from 1024 tokens on | "tiled": flash-style,
                          O(T) memory | "materialized": keeps the T x T probabilities)
                  [train] batch_size micro_batch_size (0 = batch_size / dp) steps lr min_lr
                          warmup_steps weight_decay beta1 beta2 eps grad_clip eval_every
                          eval_batches log_every seed sample_tokens (0 = none) sample_prompt
                          run_dir ("runs"; "" = none) run_name ("" = start time)
                          tensorboard (true: TensorBoard scalars in the run directory;
                          tensorboard --logdir runs) trace_flush_every (10: each rank's spans
                          to trace/rank-R.jsonl every N steps, kept by a killed run; 0 = none)
                          checkpoint_every (0 = never) checkpoint_dir keep_checkpoints
                          async_checkpoint (true: saves are written in the background
                          while training goes on; false: training waits for the disk)
                          guard_window guard_z (0 = no spike test) guard_warmup guard_max_skips
                          recompute ("none" | "selective": attention's probabilities |
                          "full": each block from its input; bitwise the same results)
                          straggler_factor (1.2; 0 = off) straggler_window (10 steps): name a
                          rank whose compute per step stays above factor x the median rank's
                          init_from ("hf:DIR": start from a Hugging Face checkpoint folder,
                          read into any layout; the model is the checkpoint's)
                          freeze (["wte.weight", "h.[0-5].*"]: shell patterns of global tensor
                          names kept fixed, with no gradients or AdamW state; the run log
                          and the plan show the bytes saved)
                          init_adapter ("DIR": a LoRA run's adapters from a PEFT folder:
                          adapter_config.json + adapter_model.safetensors)
                  [lora] rank (0 = off) alpha (scale alpha / rank) targets (PEFT's names:
                         LLaMA q_proj k_proj v_proj o_proj gate_proj up_proj down_proj;
                         GPT-2 c_attn c_proj c_fc, or attn.c_proj / mlp.c_proj) bias
                         ("none" | "all") seed dropout (only 0): the base frozen, adapters
                         trained in any layout; checkpoints hold the adapters alone
                  [data] path format (shards | bytes) val_fraction rows ("windows": seq_len + 1
                         tokens tiling the stream | "padded": one instruction sample a row |
                         "packed": samples end to end, each attending to itself only, positions
                         restarting; samples never see each other) long_samples (padded,
                         packed: "truncate" | "skip")
                  [parallel] dp (0 = infer) tp pp order ("tp-dp-pp": innermost first; cp
                             right after tp unless named, e.g. "tp-cp-dp-pp")
                             cp (context parallelism: each sequence split over cp ranks, two
                             chunks each, ring attention; model.seq_len divisible by 2 cp)
                             sequence_parallel (true | false; with tp > 1)
                             schedule ("1f1b" | "gpipe" | "interleaved" | "zb-h1" | "zb-v")
                             virtual_stages (chunks per stage: interleaved; 2 with zb-v)
                             pp_layers ([blocks per virtual stage];
                             [] = balanced by cost)
                             zero (0 | 1 | 2 | 3) bucket_mb (MiB per gradient bucket, > 0)
                             dp_reduce ("auto" | "flat" | "hierarchical": the data group's sums
                             across nodes; auto times both at start-up where a group has 2+
                             ranks on a node and others elsewhere)
                  [precision] compute (fp32 | bf16 | fp16) loss_scale ("" = dynamic for fp16, else
                             off | fixed | dynamic) initial_scale growth_factor backoff_factor
                             growth_interval hysteresis min_scale allow_unscaled_fp16
                             grad_reduce (fp32 | bf16)
                  [runtime] threads (0 = cores / ranks per node) comm_timeout_s progress_thread
                            (a communication thread per rank completes non-blocking operations;
                            default false) progress_poll_us (50)
                            isa ("auto" | "avx2" | "avx512" | "avx512_bf16" | "amx": the highest
                            instruction set the kernels may use; LOOM_MAX_CPU_ISA caps it too)
          Many processes: mpirun -np N loom train ... (add --oversubscribe when N exceeds
          the cores; as root set OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1).
          dp = N / (tp * pp) unless given; rank 0 prints the layout and logs.
          Data parallelism: batch_size = dp x micro_batch_size x accumulation steps;
          gradients accumulate over the micro-batches, then each bucket is averaged over
          the replicas while backward goes on. parallel.zero = 1 shards the AdamW state
          over the dp ranks (gradients reduce-scattered, parameters all-gathered; in bf16 /
          fp16 the fp32 master weights too), 2 also the gradients, 3 also the parameters:
          each block is all-gathered just before its forward and backward, then freed.
          Tensor parallelism (parallel.tp, Megatron-LM's scheme): every block's heads and MLP
          features, and the vocabulary, split over tp ranks (keep them inside a node); tp must
          divide model.n_head (LLaMA: and model.n_kv_head; kv heads are not replicated).
          parallel.sequence_parallel = true also splits the tokens of the
          norms and residuals (micro-batch x seq_len must divide by tp).
          Expert parallelism (parallel.ep, mixtral models): the experts spread over ep ranks of
          the data group, n_experts / ep each (ep divides dp x cp and model.n_experts); each
          MoE layer sends its routed tokens to their experts' ranks and the outputs back by
          all-to-all; the experts' gradients and ZeRO shards go over the dp x cp / ep ranks
          holding the same experts. Each step logs the all-to-all's wait.
          Pipeline parallelism (parallel.pp): blocks split into stages; each step runs
          m = batch_size / (dp x micro_batch_size) micro-batches through the schedule (GPipe,
          1F1B, interleaved 1F1B with virtual_stages chunks; interleaved needs m %% pp == 0;
          zb-h1, zero-bubble ZB-H1: each backward split into its input part, sent upstream at
          once, and its weight part, run later in 1F1B's idle time; 1F1B's peak activations,
          about a third of its bubble; zb-v, ZB-V: two chunks per stage in a V (stage s holds
          virtual stages s and 2 pp - 1 - s, so stage 0 has the embedding and the head), the
          same split backward, 1F1B's peak activations, near zero bubble; virtual_stages = 2.
          Both need m >= pp and recompute none or selective).
          Rank 0 reports the measured bubble per stage.
          Mixed precision (precision.compute = bf16 | fp16): matrix products read 16-bit copies
          of the weights and activations are stored in 16 bits (about half the memory); master
          weights, AdamW state, gradients, norms, softmax and the loss stay fp32. bf16 is the
          fast one on CPUs with avx512_bf16; fp16 (no fp16 arithmetic on CPUs) gives fp16's
          numerics and needs loss scaling (dynamic by default): a step whose gradients hold
          inf/NaN on any rank is skipped on every rank and logged with the new scale.
          Logs one line per logged step: loss, learning rate, gradient norm, tokens/s,
          achieved GFLOP/s and its share of the machine's measured fp32 peak; the planner's
          predicted peak memory and step time at the start, beside the measured ones at the end.
          Writes runs/NAME/ (config, layout, metrics.jsonl, trace.json, summary.json) for
          loom report and loom diagnose. A non-finite loss, or one guard_z standard deviations
          above the recent mean, skips the step; guard_max_skips in a row roll back to the last
          checkpoint and skip that data. A collective that misses runtime.comm_timeout_s ends
          the job naming the rank that never entered it and what that rank did last (every
          rank keeps a flight record in runs/NAME/flight/; the verdict is flight/hang.json).
  elastic Keep training through failures: mpirun of loom train, restarted on the ranks that
          are left when a rank dies or hangs.
            loom elastic --np N [--min-ranks M] [--max-restarts K] [--config FILE] [--set K=V ...]
                         [--layout auto] [--resume auto|DIR] [--fault SPEC] [--launcher mpirun|srun]
                         [-- launcher options]
          Needs train.checkpoint_every > 0 (and train.checkpoint_dir). On a rank's death (mpirun
          names it) or a hang (flight/hang.json names the culprits) it relaunches with --resume
          auto on N - failed ranks: your tp x pp with fewer replicas while that divides the
          global batch and fits, else the planner's layout, else one rank fewer, down to
          --min-ranks (default 1). The global batch stays (more micro-batches per replica).
          Up to --max-restarts (default 3) restarts; another failure (a bad config, an internal
          error) is not restarted. Each failure is a line of runs/NAME/elastic.jsonl (ranks,
          reason, step lost, time to detect and to restart, the new layout) and a row of loom
          report's Faults section. --fault applies to the first launch only. If mpirun does not
          end 15 s after a rank aborted the job (a node it cannot reach), it is stopped; a job
          whose ranks only timed out (no death, no culprit: a lost link) is named a hang and not
          restarted. --launcher srun (inside a Slurm allocation, e.g. from an sbatch script)
          launches srun --ntasks=N --kill-on-bad-exit=1 --mpi=pmix instead of mpirun and reads
          srun's "task R: Killed" lines; options after -- go to the launcher.
          Example: loom elastic --np 4 --config configs/tiny.toml --set train.checkpoint_every=10
  bench   Benchmarks (speed is measured here, never in tests).
            loom bench step [--shapes tiny,small,gpt2-124M] [--model gpt2|llama] [--threads 1,2]
                            [--steps N] [--precision fp32,bf16,fp16] [--torch-autocast] [--no-pytorch]
                            [--torch PYTHON] [--torch-compile] [--profile]
          --model llama: the LLaMA shapes llama-tiny, llama-small, llama-124M (12 layers, d_model
          768, 12 heads, 4 kv heads, SwiGLU 2048, T 256, B 4), PyTorch's LLaMA beside them.
          Tokens/s and peak RSS of a full training step (forward, backward, clip, AdamW)
          for each shape and thread count, beside PyTorch eager (tools/bench_pytorch.py,
          run with the environment as it is and tuned: OMP_WAIT_POLICY=PASSIVE, plus
          OPENBLAS_CORETYPE=SkylakeX where the CPU has AVX-512 and the environment sets no
          core type) in the same invocation, with the ratios. Starts with the CPU line.
          --precision runs loom once per compute precision (default fp32) and prints a row
          per run with activation MiB and tokens/s against loom fp32; --torch-autocast also
          runs PyTorch under bf16 autocast, and loom bf16 is compared with it.
          --torch PYTHON: the interpreter for the PyTorch side (default /usr/bin/python3, Debian's
          torch 1.13; `make bench-venv` makes .venv-latest with PyTorch 2.x: --torch
          .venv-latest/bin/python). PyTorch 2.x runs SDPA attention and fused AdamW where it has
          them; --torch-compile adds torch.compile rows (fp32, and bf16 with --torch-autocast).
          Each PyTorch row names its torch version.
          --profile: loom alone, where one step's time goes: per op kind and per op shape, ms
          per step, share of the step, and the rate against the op's own limit (the fp32 FMA
          peak, the bf16 dot-product peak, or memory bandwidth, measured in the same process).
          --freeze 'wte.weight,h.[0-5].*' (train.freeze's patterns): the trainer's own step in
          one process with every tensor trained, then with those frozen: tok/s, peak RSS and the
          parameter, gradient and AdamW MiB the engine holds, with the ratios of the two runs.
            loom bench packed [--T 2048] [--doc-len 256] [--reps 3]
          Packed rows against one sequence a row at the same shape: the tiled attention's key
          tiles visited and time, and a small GPT-2's step (tiled at T, materialized at 512).
            loom bench moe [--experts 8] [--top-k 2] [--moe-ffn 256] [--d-model 256] [--layers 4]
                           [--seq 256] [--batch 8] [--steps 8] [--balance-steps 150]
                           [--bias-rate 0.01] [--aux-coef 0.01] [--data data/sample/kjv.txt]
                           [--precision fp32|bf16|fp16]
          A mixture of experts' training step against the dense model with the same active FLOPs
          (MLP width top-k x moe-ffn), alternating on one rank: time per token, the ratio, AdamW's
          share; then the expert loads after training with moe_balance none, aux_free, sequence.
            mpirun -np 4 loom bench moe --ep 1,2,4 [--shared-ffn 256] [the sizes above]
          Expert parallelism: the MoE's step with its experts over each ep of a dp = world run:
          step time against ep 1, the all-to-all's exposed wait and its share of the step, its
          flight beside the shared expert's work, the busiest rank's received pairs over the mean,
          the experts' state per rank against ep 1, and the planner's step for the same run.
            loom bench tokenizer --tokenizer tokenizer.json [--text FILE] [--mb 1]
          A Hugging Face byte-level BPE tokenizer's encoding speed on one core, loom's beside
          the tokenizers library's (.venv; per-line encode calls) on the same lines, with the ids'
          count of both.
            loom bench comm [--ranks 2,4,8] [--min-bytes 4K] [--max-bytes 256M]
          all_reduce, reduce_scatter and all_gather bus bandwidth (as nccl-tests define it)
          over message sizes, each rank count under mpirun, beside memcpy bandwidth;
          iall_reduce: the non-blocking all-reduce the gradient sums start, waited on.
            loom bench tp [--steps 6] [--micro-batch 4] [--repeat 1]
          Tensor parallelism on the "small" shape with two cores: tp=1 (1 rank x 2 threads) against
          tp=2 (2 ranks x 1 thread) without and with sequence parallelism: tokens/s and ratio,
          share of the step spent waiting on tp communication, per-rank parameter and activation MiB.
            loom bench pp [--m 1,2,4,8,16] [--steps 4]
          Pipeline parallelism, pp=2 with one core per stage, GPipe / 1F1B / interleaved (v=2) /
          ZB-H1 / ZB-V: measured bubble per stage beside the planner's simulation (same action
          lists, measured pass times) and (pp-1)/(v m + pp-1), the largest stage bubble against
          1F1B's, activation sets held and their bound, planned activation MiB per stage, tokens/s.
            loom bench cp [--T 8192] [--steps 3] [--layers 2]
          Context parallelism on a long-sequence tiny model (--layers blocks, d_model 128, one sequence of
          T tokens per step): cp=1 (1 rank) against cp=2 (2 ranks x 1 thread, ring attention): step
          time, activation MiB per rank and their ratios, peak RSS, largest loss difference.
            loom bench cluster [--rates 1gbit,100mbit] [--steps 4] [--batch 8] [--progress off|on|off,on]
                               [--moe]
          The planner's network model on an emulated cluster (root; scripts/cluster/emulate.sh):
          2 nodes x 2 ranks, GPT-2 4 x 256, as tp2 inside each node / dp2 across, tp2 across /
          dp2 inside, dp4 with a flat reduction and dp4 with the hierarchical one
          (parallel.dp_reduce). Each layout runs on one node (compute calibrated there), then
          across the nodes at each link speed (the link measured and written as the cluster file
          .cache/cluster-emulated-2x2-RATE.toml, for loom plan --cluster): measured against
          predicted step time, communication, link cost and the share of the gradient reduction
          hidden behind backward, and the two rankings. Then dp2 across with one rank per node
          (each rank a core of its own), 4 and 1 MiB buckets, 3 runs each: the reduction's
          exposed share. --progress off,on runs each layout across the nodes without and with
          the progress thread; --batch: sequences a step. --moe: a
          Mixtral of the same sizes (4 experts of width 512, top 2) as dp4 with ep 2 (inside each
          node), ep 4 (the all-to-all across the nodes) and ep 1.
            loom bench calibrate [--mpi] [--out FILE] [--quick] [--threads N]
          Measures this machine for the planner's shape model (fp32 peak per core; the engine's
          fp32 products on three shapes: the GEMM ceiling, short-K and skinny-M penalties; bf16 and
          fp16 product rates; the tiled attention kernel; memcpy bandwidth; the process overhead
          beside a loom training step; with --mpi, 2-rank MPI all-reduce bandwidth and latency)
          and writes the cluster file loom plan reads as --cluster local (default .cache/cluster-local.toml). --quick
          --threads N: shorter, on N threads: what a single-rank loom train takes by itself (about
          2 s, once per CPU, thread count and build, cached in .cache/calibration/) when there is
          no .cache/cluster-local.toml.
            loom bench scaling [--ranks 2] [--zero 0,1,2,3] [--steps 8] [--micro-batch 4]
                               [--bucket-mb 4] [--repeat 1] [--progress off|on|on,off] [--poll-us 50]
          Weak scaling of data parallelism on the "small" shape, 1 thread per rank: 1 rank
          against N ranks for each ZeRO stage; efficiency = tokens/s(N) / (N x tokens/s(1)),
          the share of gradient-reduction time overlapped with backward, the wait after it
          and its tail (the least wait over the ranks; the rest waited for a slower rank),
          ZeRO-3's wait for parameter gathers, per-rank peak RSS, AdamW state and gradient
          memory. The "alone" row runs N one-rank jobs side by side (nothing exchanged): the
          efficiency the machine allows; "vs alone" divides each row's efficiency by it.
          --layouts dp,tp,pp also runs the N ranks as tensor-parallel ranks and as pipeline
          stages (m = N micro-batches), with the time split that explains each loss of
          efficiency (tp wait, dp wait, bubble, AdamW).
          --progress on,off runs the N ranks with and without the progress thread
          (runtime.progress_thread, polling every --poll-us) in one sitting.
            loom bench planner [--quick] [--steps 5] [--out FILE.json]
          The planner's prediction for loom's own runs against what they measured: 28 small
          layouts (dp / tp / pp up to 4 ranks, ZeRO 0-3, recompute none / selective / full,
          GPipe / 1F1B / interleaved, fp32 / bf16, GPT-2 and LLaMA), each an mpirun of loom train
          with 1 thread per rank. Per row: predicted and measured peak memory per rank (the
          largest peak RSS) and step time, with errors; memory also with the per-process
          overhead measured in the same invocation (the smallest model at each rank count) in
          place of cluster.overhead_bytes; then the worst row of each, step time apart for rows
          whose ranks outnumber the cores. Step time comes from the automatic calibration (or
          loom bench calibrate's file; the table says when neither). --quick: 6 rows on a smaller
          model. Exit 0 when it ran, whatever the errors. See docs/planner.md.
            loom bench planner --published
          The planner against published runs (no runs here): Narayanan et al. 2021 (Megatron-LM,
          SC21) Table 1, each row's published layout timed on the a100-80gb preset; predicted
          against published TFLOP/s per GPU (the paper's FLOP count), the ratios and their spread,
          where each predicted step goes, and the free search's best plan beside each row.
            loom bench checkpoint [--mb 256] [--ranks 4] [--repeat 3] [--dir PATH]
                                  [--stall-model gpt2-124m|PRESET|RUN.toml|none]
          Checkpoint save (rank files + sha256 + fsync + commit) and load (verify + assemble
          every tensor from the rank files) in MB/s, beside a plain copy (read + write + fsync)
          and a plain read of the same files, cold page cache. Then the stall of a save of one
          rank holding the model's parameters and AdamW moments: synchronous against
          asynchronous (train.async_checkpoint), and their ratio. See docs/checkpoints.md.
            loom bench elastic [--ranks 4] [--steps 60] [--kill-step 30] [--every 10] [--batch 12]
                               [--async-checkpoint]
          A tiny model under loom elastic with rank 1 killed as --kill-step begins (checkpoints
          every --every steps, synchronous unless --async-checkpoint): time to detect, time to
          restart, steps lost, and the largest loss difference from an uninterrupted run on all
          ranks, from the checkpoint on.
  report  Charts and a summary of a run directory (runs/NAME/, written by train).
            loom report RUN_DIR
          Writes RUN_DIR/report/: loss.svg, throughput.svg (and mfu.svg, loss_scale.svg when
          recorded), timeline.svg (one step of trace.json: a row per rank, spans coloured by
          kind), PNG copies by rsvg-convert (librsvg2-bin; setup.sh installs it), report.html (one
          page, every chart inline: open it in a browser) and report.md (embeds the PNGs):
          MFU, tokens/s, time split, bubble per pipeline stage, exposed communication per group
          (tp, dp, pp), overlap achieved, faults (loom elastic's restarts, stragglers, checkpoint
          stalls), predicted vs measured memory and step time.
          A partial or crashed run is reported as far as it goes, naming what is missing.
          Example: loom report runs/20261202-171500 (then open runs/20261202-171500/report/report.md)
  diagnose  Name the likely causes of a slow or unstable run, with evidence and a change to try.
            loom diagnose RUN_DIR [--json]
          Rules: pipeline-bound (a stage idles >= 20%% of the step in the bubble), communication-
          bound (exposed communication >= 25%% of the step: small per-rank batch, no overlap, tp
          across nodes), stalled stage (slowest stage >= 1.2x the mean compute), numerics
          (loss-scale collapse, skipped steps >= 10%% or 3 in a row, fp16 without loss scaling,
          non-finite loss, grad-norm spikes > 10x or loss spikes > 1.25x the recent median, loss
          rising), straggler (a rank the run named: its compute per step persistently above
          train.straggler_factor x the median rank's). See docs/observability.md.
          Both read metrics.jsonl, summary.json, layout.json and trace.json, whichever exist;
          exit code 2 only when none can be read.
          Example: loom diagnose runs/20261202-171500 --json
  export  Write a checkpoint (any layout) as Hugging Face files (GPT2LMHeadModel, LlamaForCausalLM,
          Qwen2ForCausalLM, MixtralForCausalLM or Qwen2MoeForCausalLM).
            loom export --checkpoint DIR --out DIR2 [--format hf|peft] [--merge] [--base HFDIR]
                        [--dtype f32|bf16|f16] [--tokenizer FILE] [--drop-router-bias]
          DIR is a checkpoint folder (runs/x/checkpoints/step_000100) or a root with `latest`;
          every file's sha256 is checked first. Writes DIR2/model.safetensors and DIR2/config.json
          with Hugging Face's names: GPT-2 (transformer.*, Conv1D weights as [in, out], LM head
          tied) or LLaMA (model.layers.*, q/k/v and gate/up cut out of loom's fused tensors,
          lm_head unless tied); bos/eos ids from the run's tokenizer (null for byte-level data).
          tools/check_hf_interop.py (make interop) loads both with transformers.
          A LoRA run's checkpoint: --format peft writes the adapter as PEFT does
          (adapter_config.json, adapter_model.safetensors: PeftModel.from_pretrained loads it on
          the base); --format hf --merge folds it into the base, W + alpha/r B A. The base is
          the run's train.init_from folder (its fingerprint checked) or, if moved, --base HFDIR.
          A mixture of experts balanced by aux_free biases (model.moe_balance): Mixtral has no
          place for them; export exits 2 unless --drop-router-bias (routing then by softmax alone).
          Example: loom export --checkpoint checkpoints --out hf-model --dtype bf16
  generate  Sample text from a checkpoint, single process.
            loom generate --checkpoint DIR --prompt TEXT [--temperature 0.8] [--top-k 40]
                          [--max-tokens 100] [--seed 1] [--tokenizer PATH] [--threads N]
                          [--base HFDIR]  (a LoRA checkpoint: its base, if it moved)
          The run's tokenizer (data.format shards: the one <data.path>/dataset.toml names; bytes:
          one token per byte) unless --tokenizer (a .model, tokenizer.json or HF folder) is given;
          the prompt starts with the tokenizer's BOS when it adds one. --temperature 0 is greedy;
          --top-k 0 keeps every token. Stops at end-of-text or after --max-tokens.
          --chat [--system TEXT] [--chat-template NAME]: the prompt is a user turn rendered by
          the tokenizer's chat template (or NAME: chatml, llama3, llama31, llama2, mistral) with
          the assistant's header; only the answer is printed, ending at its end-of-turn token.
          Example: loom generate --checkpoint checkpoints --prompt "The Lord said" --max-tokens 60
  info    The CPU and what loom chose for it, and the rates measured now.
            loom info [--threads N] [--isa NAME] [--json]
          Prints the line every run logs (cpu: model, instruction sets | isa in use | fp32, bf16
          and fp16 GEMM implementations), then the fp32 FMA peak and a 1024x768x768 layer
          product's GFLOP/s in fp32, bf16 and fp16. Without avx512_bf16 (or capped below it by
          --isa, runtime.isa or LOOM_MAX_CPU_ISA) bf16 products are widened to fp32 in panels.
          Example: loom info --isa avx2
  plan    Which layout of a model fits a cluster and runs fastest: a ranked table and a memo.
            loom plan --model gpt3-175b --cluster a100-80gb --devices 1024
            loom plan --config configs/NAME.toml [--set k=v] --cluster local
            loom plan --config configs/NAME.toml --layout auto --ranks N   (the layout for loom train)
            loom plan --model llama2-70b --cluster a100-80gb --devices 16
            loom plan --model llama2-70b --cluster a100-80gb --devices 8 --lora 16   (LoRA: --lora 0 never)
          Model: --model gpt2-124m|gpt2-350m|gpt2-774m|gpt2-1.5b|gpt3-6.7b|gpt3-13b|gpt3-30b|
                 gpt3-70b|gpt3-175b (family gpt2), llama2-7b|llama2-13b|llama2-70b|llama3-8b|
                 llama3-70b|llama3-405b (family llama: grouped-query attention, SwiGLU, untied head),
                 mixtral-8x7b|mixtral-8x22b (family mixtral: 8 experts, top 2),
                 a Hugging Face checkpoint folder (--model DIR: its config.json; context its
                 position limit, batch 512 sequences), or --config FILE; --layers --d-model
                 --heads --kv-heads --ffn --vocab --seq override sizes; --batch N global batch
                 in sequences.
          Cluster: --cluster NAME (configs/clusters/NAME.toml: a100-40gb, a100-80gb, h100-80gb,
                 h200-141gb, ...; or local = .cache/cluster-local.toml from loom bench calibrate) or
                 FILE.toml; --devices N; --inter-node-gbit G.
          Fix dimensions (comma lists): --dp --tp --pp --cp --ep --v --micro-batch --zero 0-3 --sp 0|1
                 --precision fp32,bf16,fp16 --recompute none,selective,full --schedule
                 1f1b,zero-bubble (zero-bubble: ZB-H1 at --v 1, ZB-V at --v 2; interleaved 1F1B
                 is 1f1b with --v > 1); --top K (default 5). --ignore-memory (with one value each
                 of --dp --tp --pp --micro-batch): time that layout even if it does not fit, the
                 table and memo marking it DOES NOT FIT. --pp-layers 3,4,...: layers per virtual
                 stage (pp x v entries, in order; uneven stages, or interleaving where the layers do
                 not divide pp x v); exit 2 unless they sum to the layers, each at least 1.
                 --grads fp32: gradients accumulated and reduced in fp32 under 16-bit compute
                 (Megatron's 18 bytes per parameter; default compute: 16 bytes).
          The sched column: 1f1b, int (interleaved), zb-h1 or zb-v (zero-bubble: backward split
                 into input and weight passes, the weight passes filling the idle time); the
                 memo gives the bubble each schedule leaves on the chosen stages.
          The cp column: context parallelism (each sequence over cp ranks, ring attention),
                 searched wherever --seq divides into 2 cp chunks; long sequences (--seq 32768)
                 need it to fit. Attention is modelled tiled from 1024 tokens on (model.attention);
                 --attention tiled|materialized|auto plans that kernel.
          Deadline: --tokens N [--deadline-days D] (exit 2 if the best plan misses it).
          --emit-config FILE: write plan #1 (model, batch, layout: dp tp pp v micro-batch zero
                 cp precision recompute sp) as a loom config: mpirun -np N loom train --config FILE.
          LoRA: --lora RANK plans adapters of that rank (alpha 2 RANK) on every linear layer of
                 the blocks (the attention's on mixtral), the base frozen in the compute type;
                 a config's [lora] is planned as given. --emit-config writes the [lora] section.
          No layout fits: the memory per device missing, why (model states against the
                 devices) and the fewest devices of that cluster that fit, with their plan; then,
                 unless --lora 0, the LoRA plans that fit these devices (exit 0); else exit 2.
                 See docs/planner.md.

exit codes: 0 success, 2 bad input (the message names the field or file), 1 internal error
environment: LOOM_HOME  where configs/, data/ and tools/ are (default: the source tree)
             LOOM_MAX_CPU_ISA  cap the kernels' instruction set (avx2, avx512, avx512_bf16, amx),
                               e.g. to run the portable paths on an AVX-512 machine
)";

// The text as printf would print it: "%%" is one "%".
std::string unescaped(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); i++) {
    out += text[i];
    if (text[i] == '%' && i + 1 < text.size() && text[i + 1] == '%') i++;
  }
  return out;
}

// "  train   Train a model." -> "train"; "" for any other line.
std::string section_name(const std::string& line) {
  if (line.size() < 3 || line[0] != ' ' || line[1] != ' ' || line[2] == ' ') return "";
  const size_t end = line.find(' ', 2);
  return end == std::string::npos ? "" : line.substr(2, end - 2);
}

}  // namespace

void print_help() { std::fputs(unescaped(kUsage).c_str(), stdout); }

bool print_command_help(const std::string& command) {
  std::istringstream in(unescaped(kUsage));
  std::string section, footer, line, current;
  bool in_footer = false;
  while (std::getline(in, line)) {
    if (line.rfind("exit codes:", 0) == 0) in_footer = true;
    if (in_footer) {
      footer += line + "\n";
      continue;
    }
    const std::string name = section_name(line);
    if (!name.empty()) current = name;
    if (current == command && !line.empty()) section += line + "\n";
  }
  if (section.empty()) return false;
  std::printf("usage: loom %s [options]   (loom --help: every command)\n\n%s\n%s", command.c_str(), section.c_str(),
              footer.c_str());
  return true;
}

}  // namespace loom::cli
