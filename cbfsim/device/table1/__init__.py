"""Table I, the measuring machinery: the paper's measurement table (Table "ESP32-S3 measurements") and bar chart, reproduced on
this host and on a Cortex-M4F and a Cortex-M7 under QEMU (and ESP32-S3 rows from captured
logs: --esp32-log), for the dual-number header against reverse-mode
baselines compiled from the same model.

Examples (the paper's three barriers):

* bicycle   4-32-32-1 ReLU,     m = 2, order 1 (``lie``: h, L_f h, L_G h)
* VdP       2-64-64-1 ReLU,     m = 1, order 1
* pendulum  2-32-32-1 Softplus, m = 1, order 2 (``lie2``: also L_f^2 h, L_G L_f h); the
            theta_dot column of W1 is zero (the paper's 1-32-32-1 net on theta alone)

The models are experiments/models/{bicycle,vdp,pendulum}.onnx when they exist, otherwise
seeded random weights (training.architectures.mlp, seeds 1, 2, 3 as in benchmarks/lie.py);
the output says which.

Methods (rows): dual one-sweep (compiler.api.compile_model, default layout), dual
min-memory (``layout="min_memory"``, the paper's one-direction-at-a-time algorithm),
reverse heap (compiler.emit_reverse, new[]/delete[] of the activation cache per call, as an
AD runtime), reverse static (the same caches as static arrays). Pendulum: hyper-dual (both
layouts) and Reverse+FD (backpropagation + central-difference Hessian-vector product of the
gradient, heap and static).

Columns:

* host median / max ns per call and jitter (max - median) / median: a C++ loop over 1,000
  seeded random states in the system's training box (f, G, f'f, f'G from systems/), every
  call timed alone with std::chrono::steady_clock, R passes after a warm-up pass, the passes
  spread over three processes run in turn across methods (R = 30; 6 with --quick). Built
  with the firmware's flags: g++ -std=c++17 -O2 -ffp-contract=off -fno-math-errno.
* Ir/call: valgrind callgrind, instructions inside the timed call (the allocator included),
  for that -O2 build and for g++ -std=c++17 -O3 -march=native.
* M4F · M7 instructions/call: the firmware's benchmark mode (firmware/common/app.hpp:
  1,000 seeded states, SysTick around each call, interrupts masked) on QEMU mps2-an386 (M4F)
  and mps2-an500 (M7) with -icount shift=0,
  where 1 SysTick tick = 40 instructions: (median - overhead) x 40 and max likewise.
  Instruction counts of an emulator, not cycles of a real core: no caches, no wait states,
  no allocator-induced cache misses -- the heap's timing jitter on silicon does not show here.
  The heap baseline links newlib's malloc through firmware/cortex-m/newlib_heap.hpp.
* static bytes: the compile-time scratch memory (dual: kWorkspaceBytes; reverse static: the
  activation cache sum_i n_i floats); heap B/call: bytes requested per call
  (``g_heap_bytes_per_call``; allocator headers come on top: glibc 8-16 B, newlib 8 B per
  block); stack: worst case from -fstack-usage + -fcallgraph-info along the call graph from
  the timed call (host -O2 build / ARM build); "+ malloc" means the allocator's own frames
  (precompiled libc) are not included.
* FLOPs: the paper's formulas (Prop. 2, Remark 5): one-sweep count, (m+1) C_df,
  C_ad + (m+1)(2n-1); hyper-dual: the compiler's count (the paper gives none); Reverse+FD:
  3 C_ad + ... (compiler.emit_reverse.reverse_flops).
* rel err: max over outputs of max |float32 result - float64 reference| / max |reference|
  on the host states (reference: compiler.reference, the float64 interpreter of the same IR,
  which tests/test_compiler_exact.py checks against torch autograd); order 2 shows the
  first-order / second-order outputs.

Outputs: results/table1/table1.md (printed too), table1.png (two panels: host median time
and dynamic memory per example, as the paper's figure), table1.json (all numbers).

    python experiments/table1.py [--quick] [--no-qemu] [--keep DIR] [--out-dir DIR] [--esp32-log EX:METHOD=FILE]
"""
from .driver import run_table1

__all__ = ["run_table1"]
