// A browser's way to follow a conversation straight from NATS: the WebSocket listener of
// deploy/nats-server.conf, the read-only `toolstream-browser` user of
// deploy/nats-permissions.conf, and a JetStream ordered consumer on TOOLSTREAM_EVENTS (not a
// plain subscription: the consumer replays the conversation from any stream sequence, so a
// page that reloads or reconnects resumes exactly after the last event it applied; a plain
// subscription only sees what is published while it is connected).
//
// Run by crates/worker/tests/ui_websocket.rs in Node, where the `ws` package stands in for the
// browser's WebSocket (Node 20 has none):
//
//   NATS_USER=toolstream-browser NATS_PASS=... node nats-ws.mjs <ws url> <conversation> <after> [probe | follow:<n>]
//
// Prints one JSON line per event, {"seq": <stream sequence>, "event": <the event>}, strictly
// after <after>, then {"caught_up": <seq>} once nothing more is stored, and stops there. With
// `follow:<n>` it goes on until it printed <n> events (connection changes printed as
// {"status": "disconnect" | "reconnect"}). With `probe` it then tries what the user must not do
// and prints what the server told it: {"told": [...]}.

import { WebSocket } from "ws";
import { wsconnect } from "@nats-io/nats-core";
import { jetstream } from "@nats-io/jetstream";

globalThis.WebSocket ??= WebSocket;

const [url, conversation, afterArg, mode = ""] = process.argv.slice(2);
const after = Number(afterArg ?? "0");
const follow = mode.startsWith("follow:") ? Number(mode.slice("follow:".length)) : 0;
const told = [];
const print = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

// --- the subscriber (the README's snippet) -------------------------------------------------
const nc = await wsconnect({
  servers: url,
  user: process.env.NATS_USER,
  pass: process.env.NATS_PASS,
  inboxPrefix: "_INBOX_toolstream-browser", // its own inbox: only it may subscribe there
});
(async () => {
  for await (const s of nc.status()) {
    if (s.type === "error") told.push(String(s.error?.message ?? s.error));
    if (s.type === "disconnect" || s.type === "reconnect") print({ status: s.type });
  }
})();
const js = jetstream(nc);
const consumer = await js.consumers.get("TOOLSTREAM_EVENTS", {
  filter_subjects: `toolstream.events.${conversation}.>`,
  opt_start_seq: after + 1, // strictly after the last event applied (0: from the start)
});
const messages = await consumer.consume();
let timer;
const quiet = () => {
  clearTimeout(timer);
  timer = setTimeout(() => {
    print({ error: "no event for 60 s" });
    process.exit(2);
  }, 60_000);
};
quiet();
let printed = 0;
let lastSeq = after;
let caughtUp = false;
const caughtUpAt = (seq) => {
  print({ caught_up: seq });
  caughtUp = true;
};
// A message's `pending` is the server's count when it was sent; a busy server (nats-server 2.9
// under load) can send the last stored event with a count that is not 0 yet. So when nothing
// arrives for a while, the consumer itself is asked: nothing pending, nothing unacked, nothing
// more stored, the page is caught up at the last event it printed.
const idle = setInterval(async () => {
  if (caughtUp) return;
  const seqBefore = lastSeq;
  try {
    const info = await consumer.info();
    if (!caughtUp && lastSeq === seqBefore && info.num_pending === 0 && info.num_ack_pending === 0) {
      caughtUpAt(lastSeq);
      if (!follow) await messages.close();
    }
  } catch (err) {
    told.push(`consumer info: ${err.message}`);
  }
}, 3_000);
for await (const m of messages) {
  print({ seq: m.seq, event: m.json() }); // m.seq: the stream sequence, the SSE id
  printed += 1;
  lastSeq = m.seq;
  quiet();
  if (!caughtUp && m.info.pending === 0) caughtUpAt(m.seq);
  if (follow ? printed >= follow : caughtUp) break;
}
clearInterval(idle);
clearTimeout(timer);
await messages.close();

// --- what it must not do -------------------------------------------------------------------
if (mode === "probe") {
  nc.publish(`toolstream.chunks.${conversation}.forged`, "{}");
  nc.publish(`toolstream.events.${conversation}.forged`, "{}");
  for (const subject of ["_INBOX_toolstream.>", "_INBOX.>"]) {
    nc.subscribe(subject, {
      callback: (err) => err && told.push(`subscription: ${err.message}`),
    });
  }
  for (const api of ["$JS.API.STREAM.INFO.TOOLSTREAM_IN", "$JS.API.CONSUMER.DELETE.TOOLSTREAM_EVENTS.x"]) {
    try {
      await nc.request(api, "", { timeout: 2000 });
      told.push(`answered: ${api}`);
    } catch (err) {
      told.push(`request ${api}: ${err.message}`);
    }
  }
  // a consumer whose subject names this conversation but whose filter reads another: the
  // server checks the filter against the subject (what lets a grant bound a tenant)
  const create = `$JS.API.CONSUMER.CREATE.TOOLSTREAM_EVENTS.probe.toolstream.events.${conversation}.>`;
  const config = { name: "probe", filter_subject: "toolstream.events.someone-else.>", ack_policy: "none", mem_storage: true };
  const answer = await nc.request(create, JSON.stringify({ stream_name: "TOOLSTREAM_EVENTS", config }), { timeout: 2000 });
  told.push(`create: ${answer.json().error?.description ?? "created"}`);
  await nc.flush();
  print({ told: [...new Set(told)] });
}
await nc.close();
