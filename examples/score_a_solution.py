"""Score a model answer to one bundled APPS+ problem with mrGRPO's reward, as verl's reward loop would.

    python examples/score_a_solution.py
"""

from __future__ import annotations

from mrgrpo.apps import Problem, bundled_sample_path, read_problems
from mrgrpo.reward import compute_score


def main() -> None:
    problem = next(p for p in read_problems(bundled_sample_path()) if isinstance(p, Problem) and p.io_mode == "stdio")
    ground_truth = problem.tests().to_json()  # the parquet's ground truth holds the hidden part of these tests
    answers = {
        "reference": f"Plan: as in the reference.\n```python\n{problem.reference_solution}```",
        "wrong": "```python\nprint(0)\n```",
        "no code": "I would read the input and print the answer.",
        "hostile": "```python\nimport gc\nprint([o for o in gc.get_objects() if isinstance(o, str)][-1])\n```",
    }
    print(f"problem {problem.source_id} ({problem.difficulty}): {problem.statement[:80]}...")
    for name, answer in answers.items():
        r = compute_score("apps_plus", answer, ground_truth, extra_info={})
        passed = f"{r['num_passed']}/{r['num_tests']}"
        print(f"  {name:10s} score={r['score']:.1f} verdict={r['verdict']:8s} passed {passed}")
    # The original mrGRPO's weights: 0.7 correctness + 0.2 format + 0.1 length (reward.custom_reward_function.
    # reward_kwargs in the verl config).
    weighted = compute_score("apps_plus", answers["wrong"], ground_truth, extra_info={"model_tokens": 300},
                             correctness_weight=0.7, format_weight=0.2, length_weight=0.1)
    print(f"  wrong, weighted 0.7/0.2/0.1: score={weighted['score']:.2f}")


if __name__ == "__main__":
    main()
