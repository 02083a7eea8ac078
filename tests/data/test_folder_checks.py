"""data.folder_checks: repeated rows merged into their first, weights agreeing, ids in range, classes in train."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xmask_cli.data.folder_checks import check_ids, check_reverse_weights, check_train_classes, repeated_rows
from xmask_cli.data.tables import Rows
from xmask_cli.errors import UsageError

ROWS = Rows(Path("g/edges.npz"))


def test_repeated_rows_keep_each_rows_first_listing():
    src = np.array([0, 1, 0, 2, 1, 0])
    dst = np.array([1, 2, 1, 0, 2, 1])
    keep, note = repeated_rows(src, dst, None, 3, ROWS)
    # Independent: a row is kept when its (src, dst) has not been seen before, in file order.
    seen: set[tuple[int, int]] = set()
    expected = []
    for u, v in zip(src.tolist(), dst.tolist()):
        expected.append((u, v) not in seen)
        seen.add((u, v))
    assert keep is not None and keep.tolist() == expected
    assert note == "merged 3 repeated rows of edges.npz; first: row 2 repeats row 0"
    assert repeated_rows(np.array([0, 1]), np.array([1, 0]), None, 2, ROWS) == (None, None)  # a reverse is no repeat


def test_a_repeat_with_another_weight_names_both_rows():
    src, dst = np.array([0, 1, 0]), np.array([1, 2, 1])
    keep, _ = repeated_rows(src, dst, np.array([1.0, 2.0, 1.0]), 3, ROWS)
    assert keep is not None and keep.tolist() == [True, True, False]
    with pytest.raises(UsageError, match=r"g/edges.npz row 2: edge \(0, 1\) has weight 3.0 but the same row "
                                         r"g/edges.npz row 0 has 1.0"):
        repeated_rows(src, dst, np.array([1.0, 2.0, 3.0]), 3, ROWS)


def test_both_directions_carry_one_weight():
    src, dst = np.array([0, 1, 1]), np.array([1, 0, 2])
    check_reverse_weights(src, dst, np.array([1.5, 1.5, 4.0]), 3, ROWS)
    with pytest.raises(UsageError, match=r"row 0: edge \(0, 1\) has weight 1.5 but its reverse g/edges.npz row 1"):
        check_reverse_weights(src, dst, np.array([1.5, 2.5, 4.0]), 3, ROWS)


def test_ids_in_range_and_every_class_in_train():
    check_ids(np.array([0, 2]), 3, ROWS, "src", "labels.npy has 3 rows")
    with pytest.raises(UsageError, match=r"row 1: src 3 is out of range: the graph has 3 nodes \(labels.npy has 3 "
                                         r"rows\), ids 0..2"):
        check_ids(np.array([0, 3]), 3, ROWS, "src", "labels.npy has 3 rows")
    y = np.array([0, 1, 1, -1, 2])
    check_train_classes(y, np.array([0, 1, 4]), "labels.npy", "train.npy")
    with pytest.raises(UsageError, match=r"^labels.npy: class 2 has no node in the training split \(train.npy\); "):
        check_train_classes(y, np.array([0, 1]), "labels.npy", "train.npy")
