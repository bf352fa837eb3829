"""The lowering report: memory figures and the self-contained HTML page.

Imports downward only (qnn, graph, diagnostics); only the API and CLI import it.
"""

from qlower.report.html import VERIFY_COLUMNS, render_html, write_html
from qlower.report.memory import MemoryReport, memory_report, tensor_bytes
from qlower.report.source import SourceGraph, snapshot
from qlower.report.verify_rows import load_verification

__all__ = ["VERIFY_COLUMNS", "MemoryReport", "SourceGraph", "load_verification", "memory_report", "render_html",
           "snapshot", "tensor_bytes", "write_html"]
