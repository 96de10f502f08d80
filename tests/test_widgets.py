"""The explorer's pure function, and the widget driven without a frontend."""

import pytest

from companion import models, targets, widgets


def test_budget_view_gives_a_budget_and_a_verdict():
    view = widgets.budget_view("llama3.1-8b", 8, 4096, "full", "h100", 8, "fsdp=-1")
    assert view.ok and view.budget.mesh["fsdp"] == 8 and view.target.num_devices == 8
    assert "fits" in view.message and "GiB per device" in view.message
    over = widgets.budget_view("llama3.1-405b", 64, 4096, "full", "h100", 64, "")
    assert over.ok and "does NOT fit" in over.message and not over.budget.fits
    assert "scheduler limit" not in view.message + over.message
    # Llama 3.1 405B's loop tail under pipelined offload on 256 H100: the scheduler fills its limit, the heap decides
    from companion import budget, targets

    target = targets.target("h100", 256)
    edge = budget.estimate("llama3.1-405b", 384, 8192, {"decoder_layer_input": "offload"},
                           {"fsdp": 128, "tensor": 2}, target=target,
                           flags={"xla_gpu_enable_pipelined_host_offloading": True})
    message = widgets.budget_message(edge, target)
    assert edge.at_scheduler_limit and "fits" in message and "check with XLA" in message


@pytest.mark.parametrize("args, message", [
    (("llama3.1-8b", 8, 4096, "full", "h100", 0, ""), "GPUs must be positive"),
    (("llama3.1-8b", 8, 4096, "full", "h100", 8, "fsdp=3"), "make the sizes multiply to 8"),
    (("llama3.1-8b", 6, 4096, "full", "h100", 8, ""), "does not divide"),
    (("llama3.1-8b", 8, 4096, "full", "h100", 12, ""), "not whole 8-GPU hosts"),
    (("llama3.1-8b", 8, 4096, "full", "h100", 8, "fsdp=8,tensor=x"), "bad mesh size"),
    (("llama3.1-405b", 64, 4096, "full", "h100", 64, "tensor=-1,fsdp=4"), "does not divide"),
])
def test_bad_inputs_become_a_message_not_an_exception(args, message):
    view = widgets.budget_view(*args)
    assert not view.ok and message in view.message and view.message.startswith("Cannot budget this")


def test_explorer_widget_updates_and_checks_with_xla():
    explorer = widgets.budget_explorer(model="tiny-llama", batch=16, seq=512, policy="full", gpu="h100", gpus=2)
    grid, buttons, status, _ = explorer.children
    controls = {c.description: c for c in grid.children}
    assert "fits" in status.value
    controls["GPUs"].value = 0  # a bad input: the widget says so
    assert "Cannot budget this" in status.value
    controls["GPUs"].value = 2
    buttons.children[0].click()  # compiles tiny-llama for 2 x H100 and overlays XLA's number
    assert "XLA:" in status.value and "budget" in status.value


def test_policy_view_prices_offload_over_the_link():
    spec = {"decoder_layer_input": "device", "query_proj": "offload", "mlpwi_0": "offload", "mlpwi_1": "offload"}
    pcie = widgets.policy_view(spec)
    c2c = widgets.policy_view(spec, link="nvlink_c2c_gb200")
    assert pcie.ok and pcie.budget.host_bytes > 0 and "PCIe" in pcie.message and "what-if" not in pcie.message
    link = pcie.link
    assert pcie.transfer_seconds == pytest.approx(pcie.budget.host_bytes / link.achievable_d2h
                                                  + pcie.budget.host_bytes / link.achievable_h2d)
    assert c2c.naive_step_seconds < pcie.naive_step_seconds
    assert "what-if: a h100 has PCIe" in c2c.message  # a GB200's link on an H100 is labelled as such
    own = widgets.policy_view(spec, gpu="gb200", gpus=8)
    assert "what-if" not in own.message and own.link.key == "nvlink_c2c_gb200"
    assert [key for _, key in widgets.link_choices("gb200")][0] == "nvlink_c2c_gb200"
    # what-ifs only at the same compute: an H100 may try GH200's C2C, never GB200's shared one
    assert [key for _, key in widgets.link_choices("h100")] == ["pcie5_x16", "nvlink_c2c_gh200"]
    assert "nvlink_c2c_gb200" not in [key for _, key in widgets.link_choices("b200")]
    saved = widgets.policy_view({k: "device" for k in spec})
    assert saved.budget.host_bytes == 0 and saved.transfer_seconds == 0


def test_policy_view_bad_inputs():
    assert "cannot be 'remat'" in widgets.policy_view({"decoder_layer_input": "remat"}).message
    assert "Cannot budget this" in widgets.policy_view({}, gpus=0).message
    assert "Cannot budget this" in widgets.policy_view({"query_proj": "host"}).message


def test_policy_explorer_drives_without_a_frontend():
    explorer = widgets.policy_explorer(offload=True)
    (toggles, _side), status = explorer.children[0].children, explorer.children[1]
    by_name = {t.description: t for t in toggles.children}
    by_name["query_proj"].value = "offload"
    assert "host" in status.value and "NVLink" not in status.value
    by_name["decoder_layer_input"].value = "offload"
    assert "Cannot" not in status.value


# ----------------------------------------------------------------------------- step time (notebook 04)


def _step_simulators():
    from companion import schedule
    from test_schedule import TARGET, offload_module

    return {widgets.step_time_key("minimal_offloaded", True, 8): schedule.prepare(offload_module(2), TARGET)}


def test_step_time_key_ignores_pipelining_without_offload():
    assert widgets.step_time_key("full", True, 8) == ("full", False, 8)
    assert widgets.step_time_key("minimal_offloaded", True, 8) == ("minimal_offloaded", True, 8)


def test_step_time_view_simulates_on_the_chosen_link():
    sims = _step_simulators()
    own = widgets.step_time_view(sims, "minimal_offloaded", True, 8, "pcie5_x16")
    fast = widgets.step_time_view(sims, "minimal_offloaded", True, 8, "nvlink_c2c_gh200")
    assert own.ok and fast.ok
    assert fast.result.step_seconds < own.result.step_seconds  # a faster link hides more of the transfer
    assert "what-if" in fast.message and "what-if" not in own.message
    assert own.message.startswith(own.result.summary())


def test_step_time_view_says_what_is_missing_and_never_raises():
    sims = _step_simulators()
    missing = widgets.step_time_view(sims, "full", False, 8, "pcie5_x16")
    assert not missing.ok and "not compiled yet" in missing.message
    bad = widgets.step_time_view(sims, "minimal_offloaded", True, 8, "pcie9")
    assert not bad.ok and "pcie9" in bad.message and "pcie5_x16" in bad.message
    assert not widgets.step_time_view(sims, "no_such_policy", True, 8, "pcie5_x16").ok


def test_policy_explorer_says_what_each_toggle_can_do_and_checks_the_step_it_budgets():
    explorer = widgets.policy_explorer(offload=False, model="llama3.1-8b")
    (toggles, side), status = explorer.children[0].children, explorer.children[1]
    by_name = {t.description: t for t in toggles.children}
    assert by_name["mlpwo"].disabled and by_name["mlpwo"].value == "remat"  # never a residual
    assert by_name["decoder_layer_input"].options == ("device",)  # the scan carry: always kept
    setup = {c.description: c for c in side.children if hasattr(c, "description")}
    assert setup["link"].disabled  # nothing to price without offload
    assert "nothing offloaded" in status.value and "PCIe" not in status.value  # no transfers to report
    setup["mesh"].value = "fsdp=3"  # a mesh that does not fit 8 GPUs: the message says why
    assert "Cannot budget this" in status.value
    setup["mesh"].value = "fsdp=4,tensor=2"
    assert "fits" in status.value


def test_compile_errors_of_any_kind_reach_the_status_line():
    import ipywidgets as w

    status, button = w.HTML(), w.Button(description="check with XLA")

    def fails():
        raise RuntimeError("INTERNAL: something in XLA\nsecond line")

    widgets._on_click_compile(button, status, fails)
    button.click()
    assert "XLA check failed: RuntimeError: INTERNAL: something in XLA" in status.value
    assert "second line" not in status.value and not button.disabled


def test_snapshots_are_the_widgets_default_views():
    budget = widgets.budget_snapshot()
    assert budget.message == widgets.budget_view("llama3.1-8b", 8, 4096, "full", "h100", 8, "fsdp=-1").message
    policy = widgets.policy_snapshot()
    assert policy.message == widgets.policy_view(widgets.default_policy_spec()).message
    for snap in (budget, policy):
        assert snap.figure is not None and snap.message in snap._repr_markdown_()


def test_plan_view_is_the_planners_budget_stage_and_never_raises():
    from companion import plan

    view = widgets.plan_view("tiny-deepseek", "gb200", 8, 512, 0.85, -1.0, "fsdp=4,expert=2")
    found = plan.search(models.config("tiny-deepseek"), targets.target("gb200", 8, mem_fraction=0.85), 512,
                        "fsdp=4,expert=2")
    assert view.rows and view.rows[0]["candidate"] == found.ranked[0][1].label()
    assert view.rows[0]["mesh"] == "fsdp=4,expert=2" and "the compile settles it" in view.message
    smaller = widgets.plan_view("tiny-deepseek", "gb200", 8, 512, 0.85, 2.0, "fsdp=4,expert=2")
    assert smaller.found.config.moe.ragged_buffer_factor == 2.0
    dense = widgets.plan_view("tiny-llama", "h100", 8, 512, 0.75, 2.0, "fsdp=8")
    assert "no routed experts" in dense.message
    bad = widgets.plan_view("tiny-llama", "h100", 8, 512, 0.75, -1.0, "fsdp=3")
    assert bad.found is None and bad.message.startswith("Cannot plan this:") and "fsdp=3" in bad.message.replace(" ", "")
    assert widgets.plan_snapshot(model="tiny-llama", gpu="h100", gpus=8, seq=512, mem_fraction=0.75,
                                 mesh="fsdp=8").message.startswith("tiny-llama on h100")
