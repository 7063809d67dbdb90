"""Signals: per-answer numbers computed from a decoding trace (per-token surprisal s_t and entropy H_t, nats).

`tracecal.signals.operators` (local risk operators over ragged arrays and the TRACE score c_TRACE = exp(−R)),
`tracecal.signals.statistics` (the one definition of each single trace statistic),
`tracecal.signals.features` (TRACE+'s feature vector φ, built from the statistics and the operators) and
`tracecal.signals.spans` (the per-token risk profile and the risky spans of each answer); all
vectorised over a `tracecal.traces.trace.TraceBatch`.
"""
