"""The ``cbfsim train`` help of every TrainConfig field without a hand-written flag: what the
field does and which way to turn it.  ``--help`` and docs/cli.md (generated from the parsers)
show these sentences; tests/test_cli_help.py refuses a flag whose help only repeats its name.

A field missing here falls back to its trailing comment in ``TrainConfig`` (config.py).
"""
from __future__ import annotations

FIELD_HELP: dict[str, str] = {
    # labels (docs/training.md, "Labels")
    "safe_fraction": "a state is labelled safe when the backup rollout from it keeps the constraint above "
                     "this fraction of its largest value; raise it to label FEWER states safe (a smaller set "
                     "the input can hold), lower it to label more",
    "label_lost": "also label 'lost' states (inside the constraint set, but the backup rollout leaves it) as "
                  "unsafe: turn on when the condition keeps failing near the edge of a set the input cannot "
                  "hold (plants that cannot stop)",
    "backup_horizon": "seconds of backup rollout that decide the safe/lost labels; raise it for slow plants "
                      "whose escapes take longer to show",
    "backup_dt": "RK4 step of the backup rollout [s] (input held over each step); lower it for fast dynamics",
    "backup_hold": "input indices the backup policy keeps at the middle of their box instead of steering "
                   "with them (e.g. a throttle that must not brake in the rollout)",
    "label_set": "a set you know the input can hold, as package.module:function taking (system, x) and "
                 "returning a margin per state (>= 0 inside): it replaces the backup rollouts for the safe/lost "
                 "labels and the warm start (e.g. systems.dubins:left_circling_margin, a set held with slack "
                 "where the full-left-safe set is held with none)",
    "scale_inputs": "map the training box to [-1, 1] before the first layer (folded into the exported "
                    "weights); turn off for a label set with sharp features at the scale of the raw states "
                    "(the Dubins car's walls, 0.02 m), which Adam fits better from raw inputs",
    # margins
    "safe_margin": "safe-labelled states are trained to h >= this margin, not just h >= 0; raise it for a "
                   "set that keeps its safe states well inside",
    "unsafe_margin": "unsafe and lost states are trained to h <= -this margin; raise it when containment "
                     "fails just outside the constraint set",
    "condition_margin": "the CBF condition is trained to hold with this much slack (h units per second) "
                        "beyond what the check needs; raise it when the condition fails at a few states or "
                        "the certifier asks for a filter margin",
    "band": "a state failing the condition may instead be pushed out of the set, to h <= -band; raise it to "
            "drop unholdable states more decisively",
    # loss weights
    "w_safe": "weight of the safe-label loss (h >= safe margin on safe states); raise it when the learned "
              "set is empty or too small",
    "w_unsafe": "weight of the unsafe/lost-label loss (h <= -unsafe margin); raise it when containment fails",
    "w_condition": "weight of the CBF-condition loss against the label losses; raise it (x10) when the "
                   "condition fails",
    # data and optimisation
    "n_uniform": "uniform training states drawn from the domain box; raise it for larger or higher-"
                 "dimensional boxes",
    "n_boundary": "extra training states nearest the constraint boundary; raise it when failures cluster there",
    "batch_size": "states per Adam step; raise it for smoother, slower steps",
    "ce_fraction": "share of each batch drawn from the counterexamples found so far (0 to <1); raise it when "
                   "the same failures come back every round",
    "steps_per_round": "Adam steps per counterexample round; raise it when the loss is still falling at the "
                       "end of each round",
    "warm_start_steps": "steps regressing h onto the scaled constraint before the rounds (0: none); raise it "
                        "when the first rounds start from an empty set",
    "label_polish": "with a label_set: full-batch float64 L-BFGS steps after the warm start that match h, its "
                    "gradient and its second derivatives to the set's margin (0: none); use it for order 2, "
                    "whose condition reads the curvature of h (the pendulum's braking edge)",
    "lr": "Adam learning rate; lower it when the loss jumps between rounds, raise it when it barely moves",
    "lr_decay": "the learning rate is multiplied by this each round (in (0, 1]); lower it to settle sooner",
    "lr_floor": "the decay stops at lr x this (in (0, 1]); raise it to keep learning in late rounds",
    "min_rounds": "train at least this many rounds even when the checks are clean; raise it to polish a "
                  "barrier that passes by a hair",
    "clean_checks": "stop after this many consecutive rounds with no failing state; raise it to be surer "
                    "before stopping",
    "check_samples": "uniform float64 states checked after each round; raise it to find rarer failures",
    "check_boundary": "extra checked states nearest h = 0, the smallest |h| of 4x as many; raise it when "
                      "failures hide on the boundary",
    "ce_neighbours": "each counterexample joins the pool with this many Gaussian neighbours (1%% of the box); "
                     "raise it when a failing region survives many rounds",
    "ce_max_per_round": "at most this many counterexamples per round join the pool; raise it when thousands "
                        "fail and the pool grows too slowly",
    "verify_samples": "states of the final compiled float32 verification (its own seed); raise it for a "
                      "stronger sampled check",
    # the certifier in the loop (docs/training.md, "Training against the certifier")
    "certify": "after the sampled rounds run the certifier (interval branch and bound) and feed its "
               "counterexamples back; the run passes only with a certificate",
    "certify_rounds": "certifier calls at most (each but the last followed by --certify-train-rounds of "
                      "training); raise it when each call shrinks the counterexamples",
    "certify_train_rounds": "sampled training rounds after each uncertified call; raise it when the same "
                            "counterexamples come back",
    "certify_time_limit": "seconds per certifier call before it stops with undecided boxes; raise it when "
                          "boxes stay undecided",
    "teacher_activation": "train a smooth network of the same widths with this activation first (e.g. "
                          "softplus), then distil it into --activation (e.g. relu, for the exact verifiers), with "
                          "counterexample rounds against a dense check and the certifier; set it when a ReLU "
                          "barrier trained directly is refuted (default: none: train directly)",
    "teacher": "distil a barrier written down instead of training a teacher: package.module:function, called "
               "(system, widths) with --teacher-hidden (else --hidden) and returning a torch module on raw states, "
               "e.g. training.teachers:spacecraft_slabs (default: none)",
    "teacher_hidden": "the teacher's hidden widths when they differ from the student's (a small student of a "
                      "larger teacher, or the widths a written-down --teacher is built for) (default: the student's)",
    "distil_steps": "steps of the student's fit to the teacher's values and gradients (then a third as many "
                    "tuning it on the conditions); raise it when the student stays far from its teacher",
    "distil_rounds": "distillation's counterexample rounds at most (each: a dense check, the certifier for "
                     "--distil-time-limit seconds, then a tune around what they found); raise it when the last "
                     "round still finds counterexamples",
    "distil_time_limit": "seconds of certifier per distillation round, doubled after each call that found "
                         "nothing (up to 4x); raise it when a student that ended clean is refuted by a longer "
                         "certification",
    "distil_stability": "weight of a tune hinge that moves the student's kinks off its zero level, so the "
                        "certifier meets fewer linear pieces there (0: none); try 0.3-1 when a ReLU student "
                        "certifies slowly (hi_ord8_relu: 1.0, 23 s -> 1.3 s)",
    "faces": "states whose two faces of the domain the filter enforces as rows, NAME:GAMMA:MARGIN each "
             "(row d/dt c + GAMMA c >= MARGIN on c = hi - x and x - lo); not used by the training rounds, "
             "written into the card for the filter and the certifier, so the claim can be closed in that "
             "state (default: none)",
    "filter_margin": "the filter margin eps the card records: `cbfsim certify` starts its margin search there "
                     "and the filter uses it until a certificate says otherwise (default: none)",
    "margin_scale": "the filter margin's state scale [bias, w_1..w_n]: the filter enforces a + b.u >= eps "
                    "(bias + w.x); set it when the room and the need grow differently with a state (the "
                    "bicycle's speed). Default none: a constant eps",
    "threads": "torch intra-op threads; keep 1 (more threads made these small batches slower, see config.py)",
}
