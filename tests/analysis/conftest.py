"""Fixtures of the analysis tests."""

from __future__ import annotations

import pytest

#: a valid 1 × 1 white RGBA PNG
_ONE_PIXEL = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
                           "0000000b49444154789c63f80f040009fb03fdfb5e6b2b0000000049454e44ae426082")


@pytest.fixture
def cheap_png():
    """Reports written with every figure built but not rasterised (``png_bytes`` returns a
    1-pixel PNG): for the tests of where and how report files are written, whose assertions
    read no pixel.  Rasterising is most of a report's time (0.5 s a figure on 2 cores); the
    figures themselves are tested by the tests that do not use this fixture."""
    from analysis import report
    from analysis.audit import report as audit_report

    def one_pixel(fig):
        assert fig.axes, "a figure without axes"       # the figure was built
        return _ONE_PIXEL

    with pytest.MonkeyPatch.context() as mp:   # its own: a test's monkeypatch.undo() keeps it
        mp.setattr(report, "png_bytes", one_pixel)
        mp.setattr(audit_report, "png_bytes", one_pixel)
        yield
