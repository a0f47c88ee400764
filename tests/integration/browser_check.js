// Drives headless Chromium (/usr/bin/chromium) with playwright-core for the output-format tests
// (tests/integration/test_format_browser.py): opens a profile in its viewer, acts as a user would,
// prints what it saw as one JSON object on stdout and keeps a screenshot.
//
//   node browser_check.js '{"mode": "speedscope"|"flamegraph", "url": ..., "screenshot": ..., ...}'
//
// speedscope: {profile: text of the thread to show}. Waits for the profile to load, steps through the
//   threads with "n" until the header names `profile`, switches to Left Heavy, hovers down the
//   flame chart (the heaviest stack) and reports each tooltip (name, file:line).
// flamegraph: {search: text}. Counts the drawn frames, types `search` in the search box, reports the
//   highlighted frames and the "matched" line, hovers the first match (tooltip), clicks it (zoom)
//   and reports its width against the chart's. Every network request is refused and counted.
"use strict";
const path = require("path");
const fs = require("fs");
const os = require("os");

const cfg = JSON.parse(process.argv[2]);
const { chromium } = require(cfg.playwright);

const ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync"];

async function speedscope(page, out) {
  await page.goto(cfg.url);
  await page.waitForFunction(() => / \(\d+\/\d+\)/.test(document.body.innerText), null, { timeout: 20000 });
  const header = () => page.evaluate(() => document.body.innerText.split("\n").find((l) => / \(\d+\/\d+\)$/.test(l)) || "");
  out.first_header = await header();
  out.profiles = Number((/\(\d+\/(\d+)\)/.exec(out.first_header) || [])[1] || 0);
  for (let i = 0; i < out.profiles && !(await header()).includes(cfg.profile); i++) {
    await page.keyboard.press("n");
    await page.waitForTimeout(200);
  }
  out.header = await header();
  await page.keyboard.press("2");                 // Left Heavy: the heaviest stack at the left edge
  await page.waitForTimeout(500);
  const canvas = await page.$$eval("canvas", (cs) => cs.map((c) => [c.width, c.height]));
  out.canvases = canvas.length;
  const base = await page.evaluate(() => document.body.innerText);
  out.hovered = [];
  for (let y = 130; y < 780; y += 8) {
    await page.mouse.move(40, y);
    await page.waitForTimeout(30);
    const text = await page.evaluate(() => document.body.innerText);
    if (text !== base) {
      const tip = text.replace(base, "").trim();
      if (tip && !out.hovered.includes(tip)) out.hovered.push(tip);
    }
  }
  await page.mouse.move(600, 60);
  await page.screenshot({ path: cfg.screenshot });
}

async function flamegraph(page, out) {
  await page.goto(cfg.url);
  await page.waitForSelector("#chart .f", { timeout: 20000 });
  out.frames = await page.$$eval("#chart .f", (els) => els.length);
  out.title = await page.title();
  await page.fill("#search", cfg.search);
  out.matches = await page.$$eval("#chart .f.match", (els) => els.map((e) => e.textContent));
  out.matched = await page.textContent("#matched");
  const first = await page.$("#chart .f.match");
  if (first) {
    const box = await first.boundingBox();
    await page.mouse.move(box.x + Math.min(box.width / 2, 20), box.y + box.height / 2);
    await page.waitForTimeout(100);
    out.tooltip = await page.textContent("#tip");
    await page.screenshot({ path: cfg.screenshot });
    await first.click();
    await page.waitForTimeout(200);
    const zoomed = await page.$$eval("#chart .f.match", (els) => els.map((e) => e.getBoundingClientRect().width));
    out.zoomed_width = Math.max(0, ...zoomed);
    out.chart_width = await page.$eval("#chart", (c) => c.clientWidth);
  } else {
    await page.screenshot({ path: cfg.screenshot });
  }
}

(async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sdb-chromium-"));   // a fresh profile every run
  const out = { requests: [] };
  let ctx;
  try {
    ctx = await chromium.launchPersistentContext(dir, { executablePath: cfg.chromium || "/usr/bin/chromium",
      headless: true, args: ARGS, viewport: { width: 1200, height: 800 } });
    const page = ctx.pages()[0] || (await ctx.newPage());
    out.console_errors = [];
    page.on("pageerror", (e) => out.console_errors.push(String(e)));
    if (cfg.mode === "flamegraph") {
      await page.route("**/*", (route) => {
        const url = route.request().url();
        if (url.startsWith("file:")) return route.continue();
        out.requests.push(url);
        return route.abort();
      });
      await flamegraph(page, out);
    } else {
      await speedscope(page, out);
    }
  } finally {
    if (ctx) await ctx.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(JSON.stringify(out) + "\n");
})().catch((e) => { process.stderr.write(String(e && e.stack || e) + "\n"); process.exit(1); });
