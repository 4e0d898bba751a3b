"""`TranscriptSFTDataset`: pre-tokenized agent-loop transcripts for verl 0.9.1's SFT trainer, masks exact.

Wired with ``data.custom_cls.path=pkg://learnability.sft_dataset data.custom_cls.name=TranscriptSFTDataset``
(``experiments/`` on ``PYTHONPATH``); verl builds it as ``cls(parquet_files=..., tokenizer=..., config=data_config,
processor=..., max_samples=...)`` (verl/trainer/sft_trainer.py, ``create_sft_dataset``). The parquet is
`learnability.transcripts.write_parquet`'s: ``input_ids`` and ``loss_mask`` per row, nothing is templated again, so
verl's per-message re-templating (and its inexact Qwen3 masks) is bypassed.

Mask semantics (verl/workers/utils/losses.py ``sft_loss``, no_padding): the engine's ``log_probs[i]`` is the
log-probability of ``input_ids[i + 1]`` (labels are ``input_ids`` rolled by -1), and ``loss_mask`` is rolled by -1
before weighting, so ``loss_mask[j] == 1`` trains token ``j``. Our ``loss_mask[j]`` is 1 exactly on the tokens the
model generated in the rollout, including each turn's closing ``<|im_end|>``; ``loss_mask[0]`` is always 0 (the
roll wraps the first token of the next sequence onto the last position of this one).

Items, as verl's MultiTurnSFTDataset returns them: ``pad_mode=no_padding`` (the default, and the only mode verl's
FSDP engine accepts): ``input_ids``, ``position_ids``, ``loss_mask`` (1-D int64, unpadded; the collator makes
nested tensors). ``pad_mode=right``: the same plus ``attention_mask``, right-padded to ``data.max_length``.
Sequences longer than ``data.max_length``: ``truncation=error`` raises when the dataset is built (naming the
count), ``right`` / ``left`` cut as verl does.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

REQUIRED_COLUMNS = ("input_ids", "loss_mask")


def _cfg_get(config, key: str, default):
    if config is None:
        return default
    value = config.get(key, default)
    return default if value is None else value


class TranscriptSFTDataset(Dataset):
    def __init__(self, parquet_files, tokenizer, config=None, processor=None, max_samples: int = -1):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.tokenizer = tokenizer
        self.pad_mode = str(_cfg_get(config, "pad_mode", "no_padding"))
        if self.pad_mode not in ("no_padding", "right"):
            raise ValueError(f"TranscriptSFTDataset: pad_mode must be 'no_padding' or 'right', got {self.pad_mode!r}")
        self.max_length = int(_cfg_get(config, "max_length", 4096))
        self.truncation = str(_cfg_get(config, "truncation", "error"))
        if self.truncation not in ("error", "left", "right"):
            raise ValueError(f"TranscriptSFTDataset: truncation must be error|left|right, got {self.truncation!r}")
        files = [parquet_files] if isinstance(parquet_files, str) else list(parquet_files)
        if not files:
            raise ValueError("TranscriptSFTDataset: no parquet files")
        from verl.utils.fs import copy_to_local

        tables = []
        for f in files:
            table = pq.read_table(copy_to_local(str(f), verbose=False))
            missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
            if missing:
                raise ValueError(f"TranscriptSFTDataset: {f} lacks columns {missing} (write it with "
                                 "`python -m learnability sft-data`)")
            tables.append(table.select(list(REQUIRED_COLUMNS)))
        table = pa.concat_tables(tables)
        if max_samples is not None and 0 < max_samples < table.num_rows:
            table = table.slice(0, max_samples)
        self.input_ids = [np.asarray(x, dtype=np.int64) for x in table.column("input_ids").to_pylist()]
        self.loss_mask = [np.asarray(x, dtype=np.int64) for x in table.column("loss_mask").to_pylist()]
        vocab = len(tokenizer) if tokenizer is not None else None
        for i, (ids, mask) in enumerate(zip(self.input_ids, self.loss_mask, strict=True)):
            self._check(i, ids, mask, vocab)
        too_long = sum(len(ids) > self.max_length for ids in self.input_ids)
        if too_long and self.truncation == "error":
            longest = max(len(ids) for ids in self.input_ids)
            raise ValueError(f"TranscriptSFTDataset: {too_long} of {len(self.input_ids)} transcripts are longer than "
                             f"data.max_length={self.max_length} (longest {longest}); raise data.max_length (and "
                             "data.max_token_len_per_gpu) or set data.truncation=right")
        print(f"TranscriptSFTDataset: {len(self.input_ids)} transcripts, "
              f"{sum(int(m.sum()) for m in self.loss_mask)} trained tokens of {sum(len(x) for x in self.input_ids)}")

    @staticmethod
    def _check(i: int, ids: np.ndarray, mask: np.ndarray, vocab: int | None) -> None:
        if len(ids) != len(mask) or len(ids) < 2:
            raise ValueError(f"TranscriptSFTDataset: row {i}: {len(ids)} input_ids but {len(mask)} loss_mask")
        if mask[0] != 0 or not np.isin(mask, (0, 1)).all():
            raise ValueError(f"TranscriptSFTDataset: row {i}: loss_mask must be 0/1 with loss_mask[0] == 0")
        if vocab is not None and (ids.min() < 0 or ids.max() >= vocab):
            raise ValueError(f"TranscriptSFTDataset: row {i}: token id outside the tokenizer's {vocab} ids "
                             "(transcripts made with another tokenizer?)")

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        input_ids = torch.from_numpy(self.input_ids[item].copy())
        loss_mask = torch.from_numpy(self.loss_mask[item].copy())
        n = input_ids.shape[0]
        if n > self.max_length:
            if self.truncation == "right":
                input_ids, loss_mask = input_ids[: self.max_length], loss_mask[: self.max_length]
            elif self.truncation == "left":
                input_ids, loss_mask = input_ids[-self.max_length :], loss_mask[-self.max_length :]
                loss_mask[0] = 0
            else:
                raise ValueError(f"transcript {item} has {n} tokens > data.max_length={self.max_length}")
            n = self.max_length
        position_ids = torch.arange(n, dtype=torch.long)
        if self.pad_mode == "no_padding":
            return {"input_ids": input_ids, "position_ids": position_ids, "loss_mask": loss_mask}
        pad = self.max_length - n
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return {
            "input_ids": torch.cat([input_ids, torch.full((pad,), pad_id, dtype=torch.long)]),
            "attention_mask": torch.cat([torch.ones(n, dtype=torch.long), torch.zeros(pad, dtype=torch.long)]),
            "position_ids": torch.cat([position_ids, torch.zeros(pad, dtype=torch.long)]),
            "loss_mask": torch.cat([loss_mask, torch.zeros(pad, dtype=torch.long)]),
        }
