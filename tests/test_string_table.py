"""StringTable: string ids resolved to dictionary columns, against a per-row reference
(hypothesis): tables numbered 0, 1, 2, ... (as nsys numbers them) and with gaps, NULL strings and
repeated texts, ids the table lacks and NULL_SENTINEL."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerecon.nsys.read_plan import NULL_SENTINEL
from tracerecon.nsys.sqlite_export import StringTable

texts = st.one_of(st.none(), st.sampled_from(["", "a", "b", "gemm", "void ns::k<(int)1>(int)"]))


@st.composite
def tables_and_ids(draw):
    values = draw(st.lists(texts, max_size=12))
    first = draw(st.integers(-3, 5))
    steps = draw(st.one_of(st.just([1] * len(values)), st.lists(st.integers(1, 3), min_size=len(values), max_size=len(values))))
    ids = [first + sum(steps[:i]) for i in range(len(values))]
    known = st.sampled_from(ids) if ids else st.nothing()
    query = draw(st.lists(st.one_of(known, st.integers(-5, 40), st.just(NULL_SENTINEL)), max_size=30))
    return values, ids, query


@settings(max_examples=300, deadline=None)
@given(tables_and_ids())
def test_ids_resolve_as_one_by_one(case):
    values, ids, query = case
    table = StringTable(pa.array(values, pa.string()), np.array(ids, dtype=np.int64))
    by_id = dict(zip(ids, values))
    q = np.array(query, dtype=np.int64)
    # positions: each id's index in the table, -1 where it has none
    assert table.positions(q).tolist() == [ids.index(i) if i in by_id else -1 for i in query]
    # as text: unknown ids and NULLs read "", "" at most once in the dictionary
    names, unknown = table.dictionary_and_unknown(q)
    assert names.to_pylist() == [(by_id.get(i) or "") for i in query]
    assert unknown == sum(i not in by_id for i in query)
    used = {i for i in query if i in by_id}
    if unknown or not values or any(by_id[i] is None for i in used):
        assert names.dictionary.to_pylist().count("") <= 1  # encoded again: every text once
    else:
        assert names.dictionary.to_pylist().count("") == sum(by_id[i] == "" for i in used)  # each string used, once
    # or null: unknown ids and NULLs are null
    names, missing = table.dictionary_or_null(q)
    assert names.to_pylist() == [by_id.get(i) for i in query]
    assert missing == sum(by_id.get(i) is None for i in query)


def test_distinct_values_are_in_order_of_first_appearance_one_code_a_value():
    # GIVEN a column of two chunks with dictionaries of their own (the first holding "a"
    # twice), a null and an empty text; and a column of nulls only, typed as such
    from tracerecon.analysis.projection import distinct_values

    col = pa.chunked_array([pa.DictionaryArray.from_arrays(pa.array([1, 0, 2, None, 1], pa.int32()), pa.array(["a", "b", "a"])),
                            pa.array(["c", "", "b"]).dictionary_encode()])
    nulls = pa.chunked_array([pa.array([None, None])])
    # WHEN its distinct values are taken: of all rows, of some, with nulls read as ""
    # THEN each value once, in the order met, and each row's code among them
    values, codes = distinct_values(col)
    assert values == ["b", "a", None, "c", ""] and codes.tolist() == [0, 1, 1, 2, 0, 3, 4, 0]
    values, codes = distinct_values(col, np.array([5, 3, 0]))
    assert values == ["c", None, "b"] and codes.tolist() == [0, 1, 2]
    values, codes = distinct_values(col, null="")
    assert values == ["b", "a", "", "c"] and codes.tolist() == [0, 1, 1, 2, 0, 3, 2, 0]
    values, codes = distinct_values(nulls, null="")
    assert values == [""] and codes.tolist() == [0, 0]
