#!/usr/bin/env bash
# Issue #39 item 3: the hidden pass (per answer, the residual stream's summaries at 3 layers: the mean over the
# answer's decoding states and the state before its first token) of a committed evidence run, computed
# teacher-forced over its stored answer tokens, then scored with the probe estimators (hidden_probe,
# hidden_probe_trace_plus) beside the run's other estimators. The same as `scripts/pass_run.sh hidden NAME`, which
# documents the run directory, resuming and saving:
#
#   bash scripts/hidden_run.sh smollm1000          # start or resume; run: /work/runs/hidden-smollm1000, log: $RUN.log
#   bash scripts/hidden_run.sh lc-qwen3k           # Qwen2.5-Coder-1.5B, TriviaQA 3,000 (the learning curve's pool)
#   bash scripts/hidden_run.sh qwen1000            # Qwen, the four tasks (transfer); TASKS=triviaqa,mlqa for a subset
#   bash scripts/hidden_run.sh smollm1000 save     # hidden/ and the scored results → docs/runs/hidden-smollm1000
exec bash "$(dirname "$0")/pass_run.sh" hidden "$@"
