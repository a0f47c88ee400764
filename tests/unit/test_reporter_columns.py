"""The sample columns of the timeline formats (firefox, speedscope): past a threshold they go to a
temporary file, so a reporter's memory does not grow with the recording; read back, nothing changes."""
from __future__ import annotations

from array import array

import pytest

from sdb_symbolize.reporters.columns import Column

pytestmark = pytest.mark.once


def test_a_long_column_spills_to_disk_and_reads_back_complete_in_order():
    # GIVEN a reporter whose sample columns spill to a file every 3 samples (65,536 by default)

    def column_roundtrip(typecode, values, spill):
        old = Column.SPILL
        Column.SPILL = spill
        try:
            col = Column(typecode)
            for v in values:
                col.append(v)
            return len(col), col.file is not None, [x for chunk in col.chunks() for x in chunk]
        finally:
            Column.SPILL = old

    values = [float(i) / 7 for i in range(11)]
    # THEN the column went to disk and reads back complete, in order, exactly
    n, spilled, back = column_roundtrip("d", values, 3)
    assert (n, spilled, back) == (11, True, values)
    # AND a column that never reached the threshold stays in memory, same values
    assert column_roundtrip("l", [3, -1, 2], 1 << 18) == (3, False, [3, -1, 2])
    assert array("d", back) == array("d", values)
