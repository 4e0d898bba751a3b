"""``mrgrpo eval``: pass@k of a checkpoint with the training agent loop and reward.

- `mrgrpo.eval.passk`: the unbiased pass@k estimator (Chen et al. 2021).
- `mrgrpo.eval.engine`: verl's server-manager interface over an in-process vLLM engine (async and sync).
- `mrgrpo.eval.run`: rows (``MrGRPODataset``), trajectories (``PlanCodeAgentLoop``), judging (``compute_score``).
- `mrgrpo.eval.report`: summary.json, per_problem.csv, report.md, passk.png.
- `mrgrpo.eval.cli`: the command.
"""
