from companion import budget, plan, targets, train

H100 = targets.target("h100")  # 8 GPUs


def test_the_largest_batch_compiles_at_that_batch_and_not_at_the_next():
    """Llama 3.1 8B, full remat, S = 4096, FSDP over 8 H100: the compiler's boundary, found from the budget's."""
    r = plan.largest_batch("llama3.1-8b", H100, 4096, "full", "fsdp=8")
    assert r.batch_step == 8 and r.batch % 8 == 0 and r.batch >= 8
    assert r.device_bytes <= r.usable_hbm_bytes < r.next_device_bytes
    assert abs(r.budget_off_by_steps) <= 1  # the budget lands within one sequence per GPU of the compiler
    assert r.compiles <= 4
    at = budget.estimate("llama3.1-8b", r.budget_batch, 4096, "full", {"fsdp": 8}, target=H100)
    beyond = budget.estimate("llama3.1-8b", r.budget_batch + 8, 4096, "full", {"fsdp": 8}, target=H100)
    assert at.fits and not beyond.fits


def test_the_budget_search_steps_by_batch_ways_and_accumulation():
    acc = train.StateConfig(gradient_accumulation_steps=2)
    one = plan.budget_largest_batch("llama3.1-8b", H100, 4096, "full", {"fsdp": 8})
    two = plan.budget_largest_batch("llama3.1-8b", H100, 4096, "full", {"fsdp": 8}, acc)
    assert one % 8 == 0 and two % 16 == 0 and two > one  # accumulation holds one microbatch's activations
    assert plan.budget_largest_batch("llama3.1-405b", H100, 4096, "full", {"fsdp": 8}) == 0  # states alone overflow


def test_a_policy_that_keeps_more_fits_less():
    fits = {p: plan.budget_largest_batch("llama3.1-8b", H100, 4096, p, {"fsdp": 8}) for p in ("minimal", "full")}
    assert 0 < fits["minimal"] < fits["full"]
