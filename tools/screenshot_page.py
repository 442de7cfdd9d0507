#!/usr/bin/env python3
"""Screenshots a page in headless Chromium (through chromedriver's WebDriver
protocol) once the page says it is done: its title ends with "(done)", or
after --wait seconds. WebGPU is on (--enable-unsafe-webgpu), so the browser
demo (`cargo xtask web`) can run first.

Usage: python3 tools/screenshot_page.py URL OUT.png [--size 1100x1600] [--wait 300]
Standard library only; needs chromium and chromedriver on PATH.
"""

import base64
import json
import socket
import subprocess
import sys
import time
import urllib.request


def call(base, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())["value"]


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    url, out = args[0], args[1]
    size = args[args.index("--size") + 1] if "--size" in args else "1100x1600"
    wait = float(args[args.index("--wait") + 1]) if "--wait" in args else 300.0
    width, height = size.split("x")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    driver = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/status", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"args": [
            "--headless=new", "--no-sandbox", "--enable-unsafe-webgpu", "--hide-scrollbars",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--window-size={width},{height}"]}}}}
        session = call(base, "POST", "/session", caps)["sessionId"]
        s = f"/session/{session}"
        call(base, "POST", s + "/url", {"url": url})
        start = time.time()
        while time.time() - start < wait:
            if call(base, "GET", s + "/title").endswith("(done)"):
                break
            time.sleep(1)
        png = call(base, "GET", s + "/screenshot")
        with open(out, "wb") as f:
            f.write(base64.b64decode(png))
        text = call(base, "POST", s + "/execute/sync",
                    {"script": "return document.body.innerText", "args": []})
        print(text)
        call(base, "DELETE", s)
    finally:
        driver.terminate()


if __name__ == "__main__":
    main()
