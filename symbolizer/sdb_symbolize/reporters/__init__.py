"""Output formats: one file each, registered here (name -> class). A reporter gets samples
through `add()` and writes with `render(out)`; it never opens files or parses arguments."""
from .collapsed import CollapsedReporter
from .endpoints import EndpointsReporter
from .firefox import FirefoxReporter
from .flamegraph import FlamegraphReporter
from .json_lines import JsonReporter
from .otlp import OtlpReporter
from .pprof import PprofReporter
from .speedscope import SpeedscopeReporter
from .summary import SummaryReporter
from .summary_by_line import SummaryByLineReporter

REPORTERS = {r.name: r for r in (CollapsedReporter, SpeedscopeReporter, PprofReporter, FlamegraphReporter,
                                 FirefoxReporter, SummaryReporter, SummaryByLineReporter, JsonReporter,
                                 EndpointsReporter, OtlpReporter)}
