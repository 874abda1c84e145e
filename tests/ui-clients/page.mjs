// Drives the worker's /ui/ page in headless Chromium (Debian's chromium, through
// playwright-core) for crates/worker/tests/ui_page.rs. Line protocol with the test:
//   argv: <page url> <screenshot path> <chromium path>
//   stdin "expect <json>"  → waits until the page shows it, prints "ok <json of the page state>"
//                            ({calls: {id: status}, applied: n, args?: {id: exact text}})
//   stdin "reload"         → reloads, prints "ok"
//   stdin "screenshot"     → saves the screenshot, prints "ok"
//   stdin "quit"           → exits 0
// A wait that does not come true within 30 s prints "fail <why>" and exits 1.
import { chromium } from "playwright-core";
import { createInterface } from "node:readline";

const [url, shot, executablePath] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox"] });
const page = await browser.newPage({ viewport: { width: 900, height: 640 } });
const logs = [];
page.on("console", (m) => logs.push(m.text()));
await page.goto(url);

// What the page shows: per call its status, arguments and result; and the events applied.
async function shown() {
  return page.evaluate(() => ({
    applied: window.toolstream.applied.length,
    received: window.toolstream.received,
    unique: new Set(window.toolstream.applied).size,
    lastId: window.toolstream.lastId,
    calls: Object.fromEntries([...document.querySelectorAll(".call")].map((c) => [c.dataset.callId, {
      status: c.dataset.status,
      partial: c.dataset.partial === "true",
      args: c.querySelector(".args").textContent,
      result: c.querySelector(".result").textContent,
    }])),
    completed: [...document.querySelectorAll("section[data-completed=true]")].map((s) => s.dataset.messageId),
  }));
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  const [cmd, ...rest] = line.split(" ");
  try {
    if (cmd === "expect") {
      const want = JSON.parse(rest.join(" ")); // {calls: {id: status}, applied: n}
      const deadline = Date.now() + 30000;
      let state;
      for (;;) {
        state = await shown();
        const callsOk = Object.entries(want.calls).every(([id, s]) => state.calls[id]?.status === s);
        const argsOk = Object.entries(want.args ?? {}).every(([id, a]) => state.calls[id]?.args === a);
        if (callsOk && argsOk && state.applied >= want.applied) break;
        if (Date.now() > deadline) throw new Error(`page shows ${JSON.stringify(state)}; console: ${logs.join(" | ")}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      console.log(`ok ${JSON.stringify(state)}`);
    } else if (cmd === "reload") {
      await page.reload();
      console.log("ok");
    } else if (cmd === "screenshot") {
      await page.screenshot({ path: shot });
      console.log("ok");
    } else if (cmd === "quit") {
      break;
    }
  } catch (e) {
    console.log(`fail ${String(e).replace(/\n/g, " ")}`);
    await close();
    process.exit(1);
  }
}
await close();
process.exit(0);

// Chromium's close can hang (headless, as root, with an event stream open): bounded.
async function close() {
  await Promise.race([browser.close(), new Promise((r) => setTimeout(r, 3000))]);
}
