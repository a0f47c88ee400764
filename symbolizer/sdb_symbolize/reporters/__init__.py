"""Output formats: one file each, registered here (name -> class). A reporter gets samples
through `add()` and writes with `render(out)`; it never opens files or parses arguments."""
from .collapsed import CollapsedReporter

REPORTERS = {r.name: r for r in (CollapsedReporter,)}
