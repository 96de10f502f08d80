"""The notation table: each notebook shows the rows it uses, and a symbol the table lacks is refused by name."""

import pytest

from companion.ground import notation


def test_a_notebook_shows_only_the_rows_defining_its_symbols():
    table = notation.markdown("B", "b", "D_in")
    rows = [line for line in table.splitlines()[2:]]
    assert [r.split("|")[1].strip() for r in rows] == ["B", "B_d, b", "D_in"]  # the table's order, each row once


def test_no_names_shows_every_row():
    assert len(notation.markdown().splitlines()) == 2 + len(notation.SYMBOLS)


def test_an_unknown_symbol_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"no symbol 'Q'.*valid: .*D_in"):
        notation.rows("Q")
