"""The notebooks' widgets in a real browser: JupyterLab (as `make lab` starts it: 127.0.0.1, token on)
driven by headless Chromium (Debian's `chromium` and `chromium-driver`, through Selenium).

For every notebook with a widget (01-05 and 07): run every cell, change an input of the notebook's widget, and
check that the widget now shows what its pure function (`widgets.budget_view`, `policy_view`,
`step_time_view`, `flag_view`, `plan_view`) gives for that input; in 01, 04 and 07, press the compile
button once and wait for the compiler's answer. Also: the server refuses a
request without the token. A failing check leaves a screenshot in `browser_tests/screenshots/`.

Run with `make test-browser` (not part of `make test`: it needs Chromium).
"""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHOTS = Path(__file__).with_name("screenshots")
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")

if not (CHROMIUM and DRIVER):  # make test-browser checks first; this keeps a bare pytest honest too
    pytest.fail("Chromium is not installed: apt-get install chromium chromium-driver", pytrace=False)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from companion import widgets  # noqa: E402


@pytest.fixture(scope="module")
def lab():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    log = open(SHOTS.parent / "jupyterlab.log", "w")
    server = subprocess.Popen([str(Path(sys.executable).with_name("jupyter")), "lab", "--no-browser",
                               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
                               f"--IdentityProvider.token={token}", "--allow-root",
                               f"--notebook-dir={ROOT / 'notebooks'}"], stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    for _ in range(90):
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except (urllib.error.URLError, ConnectionError):
            time.sleep(1)
    else:
        server.kill()
        pytest.fail("JupyterLab did not start in 90 s (see browser_tests/jupyterlab.log)")
    yield base, token
    server.terminate()
    server.wait(timeout=30)
    log.close()


@pytest.fixture
def browser(request):
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1400"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        SHOTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(SHOTS / f"{request.node.name}.png"))
    driver.quit()


def test_the_server_refuses_a_request_without_the_token(lab):
    base, _ = lab
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{base}/api/contents", timeout=10)
    assert err.value.code == 403


def _run_all(driver, base: str, token: str, notebook: str):
    driver.get(f"{base}/lab/tree/{notebook}?token={token}")
    WebDriverWait(driver, 90).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".jp-Notebook"))
    time.sleep(2)
    next(m for m in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item") if m.text.strip() == "Run").click()
    WebDriverWait(driver, 10).until(lambda d: [e for e in d.find_elements(By.CSS_SELECTOR, ".lm-Menu-itemLabel")
                                               if e.text.strip() == "Run All Cells"])
    next(e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-Menu-itemLabel")
         if e.text.strip() == "Run All Cells").click()


def _status_shows(driver, message: str, timeout: float = 120) -> None:
    WebDriverWait(driver, timeout).until(
        lambda d: any(message in e.text for e in d.find_elements(By.CSS_SELECTOR, ".widget-html")),
        message=f"no widget shows {message!r}")


def test_budget_explorer_follows_its_pure_function_and_checks_with_xla(lab, browser):
    base, token = lab
    _run_all(browser, base, token, "01_hbm_budget.ipynb")
    xpath = "//label[normalize-space()='policy']/following-sibling::select"
    WebDriverWait(browser, 300).until(lambda d: d.find_elements(By.XPATH, xpath))
    default = widgets.budget_view("llama3.1-8b", 8, 4096, "full", "h100", 8, "fsdp=-1").message
    _status_shows(browser, default)
    Select(browser.find_element(By.XPATH, xpath)).select_by_visible_text("minimal")
    changed = widgets.budget_view("llama3.1-8b", 8, 4096, "minimal", "h100", 8, "fsdp=-1").message
    assert changed != default
    _status_shows(browser, changed)
    button = next(b for b in browser.find_elements(By.CSS_SELECTOR, "button") if b.text.strip() == "check with XLA")
    button.click()
    _status_shows(browser, "XLA: ", timeout=240)


@pytest.mark.parametrize("notebook, offload", [("02_remat.ipynb", False), ("03_naive_offload.ipynb", True)])
def test_policy_explorer_follows_its_pure_function(lab, browser, notebook, offload):
    base, token = lab
    _run_all(browser, base, token, notebook)
    choice = "offload" if offload else "remat"
    xpath = (f"//*[contains(@class,'widget-toggle-buttons')][.//label[normalize-space()='mlpwi_0']]"
             f"//button[normalize-space()='{choice}']")
    WebDriverWait(browser, 300).until(lambda d: d.find_elements(By.XPATH, xpath))
    spec = widgets.default_policy_spec()
    _status_shows(browser, widgets.policy_view(spec).message)
    browser.find_element(By.XPATH, xpath).click()
    spec["mlpwi_0"] = choice
    changed = widgets.policy_view(spec).message
    _status_shows(browser, changed)


def _select(driver, label: str, visible_text: str) -> None:
    xpath = f"//label[normalize-space()='{label}']/following-sibling::select"
    Select(driver.find_element(By.XPATH, xpath)).select_by_visible_text(visible_text)


def _wait_for_control(driver, label: str, timeout: float = 300) -> None:
    xpath = f"//label[normalize-space()='{label}']/following-sibling::select"
    WebDriverWait(driver, timeout).until(lambda d: d.find_elements(By.XPATH, xpath))


def _type(driver, label: str, text: str) -> None:
    """Replace a text or number box's value and commit it (Enter: the widgets update on commit)."""
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.XPATH, f"//label[normalize-space()='{label}']/following-sibling::input")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(text, Keys.ENTER)


def _press(driver, text: str) -> None:
    next(b for b in driver.find_elements(By.CSS_SELECTOR, "button") if b.text.strip() == text).click()


def test_step_time_explorer_follows_its_pure_function_and_compiles(lab, browser):
    """Notebook 04: another link re-prices the cached pipelined compile as `widgets.step_time_view` does; the
    compile button compiles a batch not cached yet."""
    from companion import compiler, schedule, targets, train

    base, token = lab
    _run_all(browser, base, token, "04_pipelined_offload.ipynb")
    _wait_for_control(browser, "link")
    report = train.compile_step(train.trainer("llama3.1-8b", "minimal_offloaded"),
                                compiler.place(targets.target("h100", "1x8")), 8, 8192,
                                flags="--xla_gpu_enable_pipelined_host_offloading=true")
    sims = {widgets.step_time_key("minimal_offloaded", True, 8): schedule.prepare(report)}
    _status_shows(browser, widgets.step_time_view(sims, "minimal_offloaded", True, 8, "pcie5_x16").message)
    gh200 = targets.host_link("nvlink_c2c_gh200")
    _select(browser, "link", f"{gh200.name} (what-if)")
    _status_shows(browser, widgets.step_time_view(sims, "minimal_offloaded", True, 8, "nvlink_c2c_gh200").message)
    _select(browser, "batch B", "16")
    _status_shows(browser, "is not compiled yet")
    _press(browser, "compile")
    _status_shows(browser, "h100:1x8 over nvlink_c2c_gh200: step", timeout=300)


def test_flag_explorer_follows_its_pure_function(lab, browser):
    """Notebook 05: ticking a flag shows the cached compile with exactly those flags, as `widgets.flag_view`."""
    from companion import compiler, experiments, models, targets, train

    base, token = lab
    _run_all(browser, base, token, "05_scheduler_flags.ipynb")
    xpath = "//label[normalize-space()='async limit 4']//input"
    WebDriverWait(browser, 400).until(lambda d: d.find_elements(By.XPATH, xpath))
    placement = compiler.place(targets.target("h100", "1x8"))
    stack = models.config("llama3.1-8b", num_layers=16)
    runs = experiments.run(lambda fs: train.compile_layer_stack(stack, "minimal_offloaded", placement, 8, 4096, flags=fs),
                           {"MaxText's flags": None, "async limit 4": widgets.FLAG_TOGGLES["async_limit_4"]})
    browser.find_element(By.XPATH, xpath).click()
    _status_shows(browser, widgets.flag_view(runs, async_limit_4=True).message)


def test_plan_explorer_follows_its_pure_function_and_compiles(lab, browser):
    """Notebook 07: another MoE capacity re-runs the budget search as `widgets.plan_view`; on an 8B on 8 H100
    (a few seconds to compile) the button runs the planner's compile and simulation."""
    base, token = lab
    _run_all(browser, base, token, "07_deepseek_v3.ipynb")
    _wait_for_control(browser, "MoE capacity")
    _status_shows(browser, widgets.plan_view().message)
    _select(browser, "MoE capacity", "2x the balanced rows")
    _status_shows(browser, widgets.plan_view(capacity=2.0).message)
    _select(browser, "model", "llama3.1-8b")
    _select(browser, "GPU", "h100")
    _type(browser, "GPUs", "8")
    _type(browser, "mesh", "fsdp=8")
    _status_shows(browser, widgets.plan_view(model="llama3.1-8b", gpu="h100", gpus=8, mesh="fsdp=8",
                                             capacity=2.0).message)
    _press(browser, "compile and simulate")
    # the planner's compiled answer: its plan, or its one line on why no finalist fits once compiled
    _status_shows(browser, "compiled", timeout=300)
