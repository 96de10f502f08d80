"""What the explorers share: units, the models and sequences they offer, a static snapshot, the compile button."""

from __future__ import annotations

import dataclasses
import html

from ...hardware import targets


GiB = 2**30
SEQUENCES = (512, 1024, 2048, 4096, 8192, 16384, 32768)
MODELS = ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "deepseek-v3-671b", "tiny-llama", "tiny-deepseek")


def _usable(target: targets.Target) -> str:
    return (f"{target.usable_hbm_bytes / GiB:.0f} GiB usable ({target.mem_fraction:.2f} of "
            f"{target.hbm_bytes / GiB:.0f} GiB HBM)")


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What a widget shows for its default inputs, drawn without a kernel: the static fallback
    under each widget cell (GitHub and nbviewer show no live widget)."""

    message: str
    figure: object | None  # matplotlib Figure

    def _repr_markdown_(self) -> str:
        return f"**Without a live kernel, the widget's default view:** {self.message}"


def _on_click_compile(button, status, run) -> None:
    """Run ``run()`` (a compile) on click: button disabled meanwhile, errors appended to ``status``."""

    def clicked(_):
        button.disabled, label = True, button.description
        button.description = "compiling..."
        try:
            run()
        except Exception as err:  # noqa: BLE001 (a compile can fail many ways: every one is shown, none is lost)
            first = str(err).splitlines()[0] if str(err) else ""
            status.value += f"<br>XLA check failed: {type(err).__name__}: {html.escape(first)}"
        finally:
            button.disabled, button.description = False, label

    button.on_click(clicked)
