"""``make bench``: how fast the default model trains here, and where a real train stage's time goes.

1. A GEMM peak measured in this process (fp32 and bf16 square matmuls), the reference for MFU.
2. The default model trained for a fixed number of steps after warm-up in eager and compiled fp32 and bf16
   autocast, and eager bf16 with ``train.optimizer: muon``, one after another in this process: tokens/s, achieved
   GFLOP/s (6·N per token for the weights plus 12·L·d·T for attention, as in the PaLM and nanoGPT estimates) and
   MFU against the peak of the variant's precision; the default variant's step by operator (torch.profiler); the
   step's weight matmuls timed alone at their own shapes, the MFU a step of nothing but matmuls would reach; and
   the same matmuls' rate inside the profiled step (their FLOPs over the profiler's matmul kernel time).
3. A real train stage (``stages/train.py``, tracking, evaluation with samples and checkpoints on at their
   configured intervals) on the workspace's token files for ``stage_steps`` steps: wall time and the share of
   each overhead, from the seconds the loop records in ``train_run.json``; then that run resumed, timed
   until it trains again, and ``dvc repro`` with nothing changed when the workspace is up to date.
4. Serving, side by side on one model of the default size with random weights (``serving_section``): the old
   serial path, the engine through a server process on loopback at 1, 4 and 16 streaming clients, the hardware's
   bandwidth and compute limits for the model's size, and transformers and llama.cpp on the same weights.
5. The block families' step (``lab.bench.families``): gpt2, llama and Qwen3's layout in turn in one process.
6. The portable mode's cost (``lab.bench.portable``): the default model's step in the default mode and in
   portable mode (``train.portable``), each in a child process, alternating A B A B.
``measure`` takes all of them (or the parts named), handing each part's text (``format_*``) to the caller as soon as
it is measured.
On a CPU without native bf16 matmuls (``solomon.machine.bf16_matmul_native``) whatever computes in bf16 is left
out, with ``NOT_NATIVE`` as the reason: there a bf16 step takes minutes (docs/training.md).
A benchmark, not a test: nothing here asserts a time.
"""

PARTS = ("throughput", "families", "portable", "stage", "serving")  # `python -m lab bench --only` names them
SERVING_CLIENTS = (1, 4, 16)  # the engine's rows: closed-loop streaming clients (`--serving-clients`)
SERVING_REQUESTS = 4  # completions per client and client count (`--serving-requests`)
NOT_NATIVE = "this CPU has no native bf16 matmuls: bf16 runs through torch's scalar fallback here (docs/training.md)"
