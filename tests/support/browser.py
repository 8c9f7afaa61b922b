"""Debian's Chromium, driven headless by Playwright, for tests of the pages people use.

The machine has no internet: Chromium is started with the flags that stop its own background
connections, and every request a page makes to a host other than the server under test is
recorded (and aborted) so a test can assert that no asset comes from a CDN.

Skipped with a visible reason when Chromium or Playwright is missing, unless
``PRIVFIT_REQUIRE_BROWSER=1`` (set by ``.ci/run``), which turns the skip into a failure.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

import pytest

CHROMIUM = os.environ.get("PRIVFIT_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BROWSER_SKIP_REASON = "headless Chromium (Debian's chromium + the playwright package) not found"


def _require_browser() -> bool:
    return os.environ.get("PRIVFIT_REQUIRE_BROWSER", "") not in ("", "0")


@dataclass
class PageRecord:
    """What a page did: console errors, page errors and requests to other hosts."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    foreign_requests: list[str] = field(default_factory=list)


def _skip_or_fail() -> NoReturn:
    if _require_browser():
        pytest.fail(f"{BROWSER_SKIP_REASON} and PRIVFIT_REQUIRE_BROWSER=1")
    pytest.skip(BROWSER_SKIP_REASON)


def browser_available() -> bool:
    """Whether Chromium and Playwright are installed (nothing is started)."""
    return importlib.util.find_spec("playwright") is not None and bool(shutil.which(CHROMIUM))


def skip_unless_browser() -> None:
    """Skip (or fail, with ``PRIVFIT_REQUIRE_BROWSER=1``) unless a browser can be started.

    tests/conftest.py calls it before a browser test's fixtures are set up, so that a test
    skipped for want of a browser does not first start the live server it would have used."""
    if not browser_available():
        _skip_or_fail()


def chromium_browser() -> Iterator[Any]:
    """Yield a launched Playwright Chromium browser (generator for a fixture)."""
    skip_unless_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def watched_page(browser: Any, base_url: str) -> tuple[Any, PageRecord]:
    """A new page whose requests to any origin but ``base_url`` are aborted and recorded."""
    context = browser.new_context()
    page = context.new_page()
    record = PageRecord()

    def on_console(message: Any) -> None:
        if message.type == "error":
            record.console_errors.append(message.text)

    def on_route(route: Any) -> None:
        url: str = route.request.url
        if url.startswith(base_url) or url.startswith(("data:", "blob:", "about:")):
            route.continue_()
        else:
            record.foreign_requests.append(url)
            route.abort()

    page.on("console", on_console)
    page.on("pageerror", lambda error: record.page_errors.append(str(error)))
    context.route("**/*", on_route)
    return page, record
