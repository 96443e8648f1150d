"""ignis.tuning: the kernel families' settings, read, set for a block or for good, from the
environment at start-up, checked; and the plans that are keyed on them (pure planning, no GPU)."""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import subprocess
import sys
import warnings

import pytest
from ignis._array._cuda_backend import attention, elementwise, norm_loss, reduction

import ignis
from ignis import _tuning

FAMILIES = (
    "attention",
    "reduction",
    "softmax",
    "norm_loss",
    "elementwise",
    "indexing",
    "optim",
    "activation",
    "matmul",
)


@pytest.fixture(autouse=True)
def _settings_restored():
    saved = ignis.tuning()
    yield
    ignis.tuning.set(saved)


# --- reading ----------------------------------------------------------------------------------


def test_every_family_and_setting_is_readable_with_its_default():
    settings = ignis.tuning()
    assert isinstance(settings, _tuning.Settings)
    assert ignis.tuning.families == FAMILIES
    assert settings == ignis.tuning.defaults()  # (the tests run without IGNIS_TUNE_* set)
    assert settings.attention.simt_fused_dq is False
    assert settings.attention.bwd_tiles == "auto"
    assert settings.reduction.cols_wide is True and settings.reduction.cols_wide_resident is None
    assert settings.optim.chunk == 1 << 16
    knobs = ignis.tuning.knobs()
    assert {k.family for k in knobs} == set(FAMILIES)
    for k in knobs:
        assert k.value == k.default == getattr(getattr(settings, k.family), k.name)
        assert k.variable == f"IGNIS_TUNE_{k.family.upper()}_{k.name.upper()}"
        assert k.doc, k
    text = repr(settings)
    assert text == repr(ignis.tuning)
    assert all(f"{k.family}.{k.name} = {k.value!r}" in text for k in knobs)
    assert "default:" not in text


def test_the_listing_shows_defaults_where_settings_differ():
    text = repr(ignis.tuning(attention=dict(simt_fused_dq=True), optim=dict(chunk=4096)))
    assert "attention.simt_fused_dq = True  (default: False)" in text
    assert "optim.chunk = 4096  (default: 65536)" in text
    assert "attention.simt_tiled = True\n" in text


def test_settings_are_immutable_and_hashable():
    settings = ignis.tuning()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.attention.simt_fused_dq = True  # type: ignore[misc]
    with pytest.raises(TypeError, match="read-only"):
        settings.attention.wgmma_tiles[64] = (2, 128)
    changed = settings.attention.replace(simt_fused_dq=True)
    again = settings.attention.replace(simt_fused_dq=True)
    assert changed == again and hash(changed) == hash(again) and changed is not again
    assert changed != settings.attention
    assert hash(settings) == hash(ignis.tuning.defaults())
    assert settings.attention.replace().differences() == {}
    assert changed.differences() == {"simt_fused_dq": True}


def test_settings_pickle_and_copy():
    tiles = {64: (2, 64), 128: (2, 128)}
    settings = ignis.tuning(attention=dict(simt_fused_dq=True, wgmma_tiles=tiles))
    for again in (pickle.loads(pickle.dumps(settings)), copy.deepcopy(settings)):
        assert again == settings and hash(again) == hash(settings)
        assert isinstance(again.attention.wgmma_tiles, _tuning.Table)


def test_tables_are_given_as_mappings_and_kept_read_only():
    tiles = {64: [2, 128], 128: (2, 128)}  # (a list becomes a tuple)
    settings = ignis.tuning(attention=dict(wgmma_tiles=tiles))
    table = settings.attention.wgmma_tiles
    assert isinstance(table, _tuning.Table) and table == {64: (2, 128), 128: (2, 128)}
    assert dict(table) == {64: (2, 128), 128: (2, 128)}
    assert hash(table) == hash(_tuning.Table({128: (2, 128), 64: (2, 128)}))
    for change in (lambda: table.update({}), lambda: table.pop(64), table.clear):
        with pytest.raises(TypeError, match="read-only"):
            change()


# --- blocks, set, reset -----------------------------------------------------------------------


def test_a_block_sets_and_restores():
    with ignis.tuning(attention=dict(simt_fused_dq=True)) as inside:
        assert ignis.tuning().attention.simt_fused_dq is True
        assert ignis.tuning() is inside
    assert ignis.tuning().attention.simt_fused_dq is False


def test_nested_blocks_restore_in_turn_also_after_an_error():
    with ignis.tuning(reduction=dict(group_max_n=64)):
        with ignis.tuning(reduction=dict(min_chunk=256)):
            now = ignis.tuning().reduction
            assert (now.group_max_n, now.min_chunk) == (64, 256)  # the outer block's, and its own
        assert (ignis.tuning().reduction.group_max_n, ignis.tuning().reduction.min_chunk) == (
            64,
            8192,
        )
        with pytest.raises(RuntimeError):
            with ignis.tuning(softmax=dict(packed=False)):
                raise RuntimeError("inside")
        assert ignis.tuning().softmax.packed is True
    assert ignis.tuning() == ignis.tuning.defaults()


def test_the_same_settings_entered_twice_nest():
    settings = ignis.tuning(optim=dict(chunk=1024))
    with settings:
        with settings:
            assert ignis.tuning().optim.chunk == 1024
        assert ignis.tuning().optim.chunk == 1024
    assert ignis.tuning().optim.chunk == 1 << 16


def test_set_is_for_good_returns_what_it_replaced_and_reset_restores_start_up():
    before = ignis.tuning()
    previous = ignis.tuning.set(indexing=dict(blocks_per_sm=16), activation=dict(blocks_per_sm=8))
    assert previous is before
    assert ignis.tuning().indexing.blocks_per_sm == 16
    assert ignis.tuning().activation.blocks_per_sm == 8
    ignis.tuning.set(optim=dict(chunk=8))  # changes add up
    assert ignis.tuning().indexing.blocks_per_sm == 16 and ignis.tuning().optim.chunk == 8
    ignis.tuning.set(previous)
    assert ignis.tuning() is before
    ignis.tuning.set(optim=dict(chunk=8))
    ignis.tuning.reset()
    assert ignis.tuning() == ignis.tuning.defaults()
    with pytest.raises(TypeError, match="settings or changes"):
        ignis.tuning.set(before, optim=dict(chunk=8))
    with pytest.raises(TypeError, match="expected the Settings"):
        ignis.tuning.set({"optim": {"chunk": 8}})  # type: ignore[arg-type]


def test_a_block_undoes_a_set_inside_it():
    with ignis.tuning():
        ignis.tuning.set(norm_loss=dict(warp_max_n=32))
        assert ignis.tuning().norm_loss.warp_max_n == 32
    assert ignis.tuning().norm_loss.warp_max_n == 1024


def test_a_family_takes_its_settings_object_too():
    mine = ignis.tuning().softmax.replace(packed_items=4)
    with ignis.tuning(softmax=mine):
        assert ignis.tuning().softmax is mine


# --- names and values that are not valid --------------------------------------------------------


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="no kernel family 'atention'; expected one of attention, "
                       "reduction, softmax, norm_loss, elementwise, indexing, optim, activation"):
        ignis.tuning(atention=dict(simt_fused_dq=True))
    with pytest.raises(ValueError, match="attention has no setting 'simt_fused'; expected one of "
                       "fwd_rows_per_warp, fwd_wgmma, .*simt_fused_dq, simt_tiles"):
        ignis.tuning(attention=dict(simt_fused=True))
    with pytest.raises(TypeError, match=r"attention= takes a mapping .*AttentionSettings"):
        ignis.tuning(attention=True)
    with pytest.raises(TypeError, match=r"attention= takes .*ReductionSettings|takes a mapping"):
        ignis.tuning(attention=ignis.tuning().reduction)


@pytest.mark.parametrize(
    "family,changes,error,message",
    [
        ("attention", {"simt_fused_dq": 1}, TypeError, "attention.simt_fused_dq is 1; expected "
         "True or False"),
        ("attention", {"bwd_tiles": "k256q32w16"}, ValueError, "attention.bwd_tiles is "
         "'k256q32w16'; expected 'auto' or one of k64q32w4, k128q32w8, k128q64w8"),
        ("attention", {"fwd_rows_per_warp": 8}, ValueError, "expected one of 16, 32"),
        ("attention", {"wgmma_tiles": {64: (3, 128)}}, ValueError,
         r"wgmma_tiles is .*; expected a table with the keys \[64, 128\]"),
        ("attention", {"wgmma_tiles": {64: (5, 128), 128: (2, 128)}}, ValueError,
         r"warpgroups 1-4.*\(at 64: \(5, 128\)\)"),
        ("attention", {"wgmma_short_causal_tiles": {96: (10, (2, 128))}}, ValueError,
         r"keys among \[64, 128\]"),
        ("attention", {"bwd_tiles_auto": {32: "k64q32w4"}}, ValueError,
         r"keys \[32, 64, 96, 128\]"),
        ("attention", {"simt_tiles": {}}, ValueError, "a table with the keys"),
        ("attention", {"simt_tiles": 3}, TypeError, "expected a table"),
        ("reduction", {"group_max_n": 0}, ValueError, "reduction.group_max_n is 0; expected an "
         "int >= 1"),
        ("reduction", {"group_max_n": 64.0}, TypeError, "expected an int"),
        ("reduction", {"cols_wide_resident": "12"}, TypeError, "expected an int or None"),
        ("norm_loss", {"param_block_y": 16}, ValueError, "expected an int from 1 to 8"),
        ("optim", {"chunk": 6}, ValueError, "optim.chunk is 6; expected a positive multiple of 4"),
    ],
)
def test_bad_values_name_the_setting_and_what_was_expected(family, changes, error, message):
    with pytest.raises(error, match=message):
        ignis.tuning(**{family: changes})
    assert ignis.tuning() == ignis.tuning.defaults()  # nothing changed


def test_a_simt_tile_table_is_checked_entry_by_entry():
    tiles = {case: dict(kinds) for case, kinds in ignis.tuning().attention.simt_tiles.items()}
    tiles[("float32", 64)]["fwd"] = (64, 64, 3, 2)  # three stages: the kernels take 1 or 2
    with pytest.raises(ValueError, match=r"stages 1 or 2.*\(at 'fwd': \(64, 64, 3, 2\)\)"):
        ignis.tuning(attention=dict(simt_tiles=tiles))
    tiles[("float32", 64)]["fwd"] = (64, 32, 2, 2)
    settings = ignis.tuning(attention=dict(simt_tiles=tiles))
    assert settings.attention.simt_tiles[("float32", 64)]["fwd"] == (64, 32, 2, 2)


# --- the environment ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,value", [("1", True), ("true", True), (" Yes ", True), ("ON", True), ("0", False),
                   ("false", False), ("no", False), ("off", False)]
)
def test_booleans_from_the_environment(text, value):
    env = {"IGNIS_TUNE_ATTENTION_SIMT_FUSED_DQ": text}
    assert _tuning.from_environ(env).attention.simt_fused_dq is value


def test_ints_strings_optional_ints_and_tables_from_the_environment():
    settings = _tuning.from_environ(
        {
            "IGNIS_TUNE_NORM_LOSS_WARP_MAX_N": "512",
            "IGNIS_TUNE_OPTIM_CHUNK": "0x1000",
            "IGNIS_TUNE_REDUCTION_STRIDED_MAX": "1_000_000",
            "IGNIS_TUNE_REDUCTION_COLS_WIDE_RESIDENT": "264",
            "IGNIS_TUNE_ATTENTION_BWD_TILES": "k128q32w8",
            "IGNIS_TUNE_ATTENTION_WGMMA_TILES": "{64: (2, 128), 128: (2, 64)}",
            "IGNIS_OTHER": "ignored",  # not a tuning variable
        }
    )
    assert settings.norm_loss.warp_max_n == 512 and settings.optim.chunk == 4096
    assert settings.reduction.strided_max == 1_000_000
    assert settings.reduction.cols_wide_resident == 264
    assert settings.attention.bwd_tiles == "k128q32w8"
    assert settings.attention.wgmma_tiles == {64: (2, 128), 128: (2, 64)}
    assert _tuning.from_environ({"IGNIS_TUNE_REDUCTION_COLS_WIDE_RESIDENT": "none"}) == (
        ignis.tuning.defaults()
    )
    assert _tuning.from_environ({}) == ignis.tuning.defaults()


@pytest.mark.parametrize(
    "var,text,message",
    [
        ("IGNIS_TUNE_ATTENTION_SIMT_FUSED_DQ", "maybe",
         "IGNIS_TUNE_ATTENTION_SIMT_FUSED_DQ='maybe': expected a boolean: 1, 0, true, false"),
        ("IGNIS_TUNE_NORM_LOSS_WARP_MAX_N", "lots",
         "IGNIS_TUNE_NORM_LOSS_WARP_MAX_N='lots': expected an int"),
        ("IGNIS_TUNE_NORM_LOSS_WARP_MAX_N", "0",
         "IGNIS_TUNE_NORM_LOSS_WARP_MAX_N='0': expected an int >= 1"),
        ("IGNIS_TUNE_REDUCTION_COLS_WIDE_RESIDENT", "many", "expected an int or none"),
        ("IGNIS_TUNE_OPTIM_CHUNK", "6", "IGNIS_TUNE_OPTIM_CHUNK='6': expected a positive multiple"),
        ("IGNIS_TUNE_ATTENTION_BWD_TILES", "fast",
         "IGNIS_TUNE_ATTENTION_BWD_TILES='fast': expected 'auto' or one of k64q32w4"),
        ("IGNIS_TUNE_ATTENTION_WGMMA_TILES", "{64: (2,",
         r"IGNIS_TUNE_ATTENTION_WGMMA_TILES='\{64: \(2,': expected a Python literal of a table "
         r"like \{64: \(3, 128\), 128: \(2, 128\)\}"),
        ("IGNIS_TUNE_ATTENTION_WGMMA_TILES", "{64: (2, 128)}", r"expected a table with the keys"),
        ("IGNIS_TUNE_ATTENTION_SIMT_FUSED", "1",
         "IGNIS_TUNE_ATTENTION_SIMT_FUSED: no such tuning setting; expected one of "
         "IGNIS_TUNE_ATTENTION_FWD_ROWS_PER_WARP, .*IGNIS_TUNE_ATTENTION_SIMT_FUSED_DQ"),
        ("IGNIS_TUNE_NORM_WARP_MAX_N", "1",
         "no such tuning setting; expected IGNIS_TUNE_<FAMILY>_<NAME> with FAMILY one of "
         "ATTENTION, REDUCTION, SOFTMAX, NORM_LOSS, ELEMENTWISE, INDEXING, OPTIM, ACTIVATION"),
    ],
)
def test_bad_environment_values_name_the_variable_the_value_and_what_was_expected(
    var, text, message
):
    with pytest.raises(ValueError, match=message):
        _tuning.from_environ({var: text})


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("IGNIS_TUNE_")}
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=120
    )


def test_start_up_settings_come_from_the_environment_and_reset_returns_to_them():
    code = (
        "import ignis\n"
        "s = ignis.tuning()\n"
        "print(s.attention.simt_fused_dq, s.indexing.blocks_per_sm)\n"
        "ignis.tuning.set(attention=dict(simt_fused_dq=False)); ignis.tuning.reset()\n"
        "print(ignis.tuning().attention.simt_fused_dq, ignis.tuning.defaults().attention"
        ".simt_fused_dq)\n"
    )
    out = _python(
        code, IGNIS_TUNE_ATTENTION_SIMT_FUSED_DQ="1", IGNIS_TUNE_INDEXING_BLOCKS_PER_SM="8"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "8", "True", "False"]


def test_a_bad_start_up_variable_stops_the_import_with_its_name():
    out = _python("import ignis", IGNIS_TUNE_OPTIM_CHUNK="lots")
    assert out.returncode != 0
    assert "ValueError: IGNIS_TUNE_OPTIM_CHUNK='lots': expected an int" in out.stderr


# --- plans keyed on the settings (pure planning: no GPU) -----------------------------------------


def test_attention_kernel_choice_follows_the_settings():
    names = attention.kernel_names("float32", 64, False)
    assert names["fwd"].startswith("ignis::attn::flash_fwd_simt_tiled<float, 64, false, 64, 64,")
    with ignis.tuning(attention=dict(simt_tiled=False)):
        assert attention.kernel_names("float32", 64, False)["fwd"] == (
            "ignis::attn::flash_fwd_simt<float, 64, false>"
        )
    tc = attention.kernel_names("bfloat16", 64, True)
    assert tc["fwd"].startswith("ignis::attn::flash_fwd_tc_m32<")
    assert tc["bwd_fused"].endswith(", 128, 32, 2, false, true>")  # "auto" at head dim 64
    tune = ignis.tuning(attention=dict(fwd_rows_per_warp=16, bwd_tiles="k64q32w4")).attention
    other = attention.kernel_names("bfloat16", 64, True, tune=tune)
    assert other["fwd"].startswith("ignis::attn::flash_fwd_tc<")
    assert other["bwd_fused"].endswith(", 64, 32, 0, false, false>")
    auto = {**ignis.tuning().attention.bwd_tiles_auto, 64: "k128q64w8"}
    with ignis.tuning(attention=dict(bwd_tiles_auto=auto)):
        assert attention.bwd_tiles(None, 64) == attention.BWD_TILE_VARIANTS["k128q64w8"]
    assert attention.bwd_tiles(None, 64).min_blocks == 2  # the default's again


def test_hopper_forward_tiles_follow_the_settings():
    assert attention.wgmma_fwd_tiles(64, True, 1024) == (2, 128)  # short causal
    assert attention.wgmma_fwd_tiles(64, True, 4096) == (3, 128)
    assert attention.wgmma_fwd_tiles(128, False, 10) == (2, 128)
    with ignis.tuning(
        attention=dict(
            wgmma_tiles={64: (2, 64), 128: (1, 128)}, wgmma_short_causal_tiles={}
        )
    ):
        assert attention.wgmma_fwd_tiles(64, True, 1024) == (2, 64)
        assert attention.wgmma_fwd_tiles(128, False, 10) == (1, 128)
        name = attention.wgmma_fwd_name("float16", 64, True, attention.wgmma_fwd_tiles(64, True, 9))
        assert name == "ignis::attn::flash_fwd_wgmma<ignis::float16, 64, true, 2, 64>"


def test_attention_plans_are_keyed_on_the_settings():
    ignis.clear_caches()
    tune = ignis.tuning().attention
    first = attention._names("bfloat16", 64, True, tune)
    assert attention._names("bfloat16", 64, True, tune) is first
    other = tune.replace(bwd_tiles="k128q64w8")
    assert attention._names("bfloat16", 64, True, other)["bwd_fused"] != first["bwd_fused"]
    # equal settings (another object) find the same plan
    assert attention._names("bfloat16", 64, True, tune.replace()) is first
    info = ignis.cache_info()["cuda.attention.plans"]
    assert (info.entries, info.hits, info.misses) == (2, 2, 2)


def test_reduction_and_softmax_choices_follow_the_settings():
    assert reduction.softmax_rows_config(32768, 2, True, half=True) == ("packed", 8, 8, 512)
    with ignis.tuning(softmax=dict(packed=False)):
        assert reduction.softmax_rows_config(32768, 2, True, half=True)[0] == "block"
    tune = ignis.tuning(softmax=dict(warp_max_n=64)).softmax
    assert reduction.softmax_rows_config(100, 4, True, tune=tune)[0] == "block"
    assert reduction.softmax_rows_config(100, 4, True)[0] == "warp"
    ws = reduction.wide_splits
    assert ws(64, 16384, 396, 1024, 16384 * 4) == 6
    tune = ignis.tuning(reduction=dict(cols_wide_min_rows=8192)).reduction
    assert ws(64, 16384, 396, 1024, 16384 * 4, tune) == 2  # at most one split per 8192 rows
    fixed = ignis.tuning(reduction=dict(cols_wide_resident=12)).reduction
    assert reduction._resident_blocks(None, "any", (32, 8), fixed) == 12
    assert reduction._resident_blocks(None, "any", (32, 8)) == reduction.COLS_WIDE_RESIDENT


def test_reduction_recipes_are_keyed_on_the_settings_in_force():
    before = reduction._knobs()
    assert before is ignis.tuning().reduction
    with ignis.tuning(reduction=dict(cols_wide=False)):
        assert reduction._knobs() is ignis.tuning().reduction and reduction._knobs() != before
    assert reduction._knobs() is before


def test_norm_row_configuration_follows_the_settings():
    assert norm_loss.row_config(512, 4, 4, 1) == (True, 4, 128)
    tune = ignis.tuning(norm_loss=dict(warp_max_n=256, warp_rows_per_block=8)).norm_loss
    assert norm_loss.row_config(512, 4, 4, 1, tune=tune)[0] is False
    assert norm_loss.row_config(256, 4, 4, 1, tune=tune) == (True, 2, 256)


def test_element_wise_caches_forget_what_a_setting_chose():
    elementwise._grid_caps.remember(99, 1234)
    elementwise._layouts.remember(("transpose", "a key"), None)
    with ignis.tuning(reduction=dict(group_max_n=64)):  # another family: kept
        assert elementwise._grid_caps.get(99) == 1234
    with ignis.tuning(elementwise=dict(blocks_per_sm=4)):
        assert 99 not in elementwise._grid_caps and not elementwise._layouts
        elementwise._grid_caps.remember(99, 4)
    assert 99 not in elementwise._grid_caps  # forgotten again on the way out


def test_a_transpose_plan_follows_the_shortest_dims_setting():
    shape, dst, src = (20, 20), (80, 4), (4, 80)  # a float32 20 x 20 transpose
    assert elementwise._transpose_plan(shape, dst, src, 4, 4) is not None
    with ignis.tuning(elementwise=dict(transpose_min=32)):
        assert elementwise._transpose_plan(shape, dst, src, 4, 4) is None
    assert elementwise._transpose_plan(shape, dst, src, 4, 4) is not None


# --- the module globals the settings replaced ---------------------------------------------------


def test_former_module_globals_read_and_set_the_settings_with_a_warning():
    with pytest.warns(DeprecationWarning, match="attention.SIMT_FUSED_DQ is ignis.tuning's "
                      r"attention.simt_fused_dq: use ignis.tuning\(attention=dict\("):
        assert attention.SIMT_FUSED_DQ is False
    with pytest.warns(DeprecationWarning):
        attention.SIMT_FUSED_DQ = True
    assert ignis.tuning().attention.simt_fused_dq is True
    with pytest.warns(DeprecationWarning, match="softmax.packed"):
        reduction.SOFTMAX_PACKED = False
    assert ignis.tuning().softmax.packed is False
    with pytest.raises(ValueError, match="bwd_tiles is 'nope'"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        attention.BWD_TILES = "nope"
    with pytest.raises(AttributeError, match="has no attribute 'NO_SUCH_KNOB'"):
        attention.NO_SUCH_KNOB  # noqa: B018
    assert attention.HEAD_DIMS == (32, 64, 96, 128)  # the constants stay module constants
    assert reduction.MAX_GRID == 1 << 20
