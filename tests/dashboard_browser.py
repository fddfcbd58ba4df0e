"""Headless Chromium for the dashboard's browser tests and screenshots: the Debian
packages' ``chromium`` and ``chromedriver`` driven through Selenium, with the driver's
path given explicitly so Selenium Manager never downloads a browser or driver."""

from __future__ import annotations

import os
import shutil

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_NAMES = ("chromium", "chromium-browser")


def chromium_binary() -> str | None:
    """The system Chromium, or None when it is not installed."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def missing() -> str | None:
    """Why a browser cannot be started here, or None when it can."""
    if chromium_binary() is None:
        return "chromium is not installed (apt-get install chromium chromium-driver)"
    if not os.access(CHROMEDRIVER, os.X_OK):
        return f"{CHROMEDRIVER} is missing (apt-get install chromium-driver)"
    return None


def start_browser(width: int = 1280, height: int = 900):
    """A headless Chromium WebDriver (selenium is imported here, not at collection)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # belt and braces: no Selenium Manager
    options = webdriver.ChromeOptions()
    options.binary_location = chromium_binary()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars",
                "--disable-extensions", "--no-first-run", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
