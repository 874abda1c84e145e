// Reads a toolstream UI event stream (the raw SSE body) on stdin and checks it with the real
// client library of its format, then prints what the library made of it as one JSON line:
//   node check.mjs ai-sdk < body   -> {"chunks": n, "done": bool, "message": <UIMessage>,
//                                       "deltas": {toolCallId: concatenated inputTextDelta},
//                                       "streaming": [{toolCallId, input}: each tool part the
//                                                     reader showed in state input-streaming]}
//   node check.mjs ag-ui  < body   -> {"events": [<parsed events>]}
// Any chunk or event the library refuses is printed to stderr and the exit code is 1.
import { readFileSync } from "node:fs";

const format = process.argv[2];
const body = readFileSync(0, "utf8");

// SSE: events end at a blank line; only data lines matter to these formats.
const datas = [];
for (const block of body.split(/\r?\n\r?\n/)) {
  const lines = block.split(/\r?\n/).filter((l) => l.startsWith("data:"));
  if (lines.length === 0) continue;
  datas.push(lines.map((l) => l.slice(5).replace(/^ /, "")).join("\n"));
}

function fail(message) {
  process.stderr.write(message + "\n");
  process.exit(1);
}

if (format === "ai-sdk") {
  const { readUIMessageStream, uiMessageChunkSchema } = await import("ai");
  const { safeValidateTypes } = await import("@ai-sdk/provider-utils");
  let done = false;
  const chunks = [];
  for (const data of datas) {
    if (data === "[DONE]") {
      done = true;
      continue;
    }
    const value = JSON.parse(data);
    const checked = await safeValidateTypes({ value, schema: uiMessageChunkSchema });
    if (!checked.success) fail(`not a UI message chunk: ${data}: ${checked.error}`);
    chunks.push(checked.value);
  }
  const stream = new ReadableStream({
    start(controller) {
      for (const c of chunks) controller.enqueue(c);
      controller.close();
    },
  });
  const deltas = {};
  for (const c of chunks) {
    if (c.type === "tool-input-delta") deltas[c.toolCallId] = (deltas[c.toolCallId] ?? "") + c.inputTextDelta;
  }
  let message = null;
  const errors = [];
  const streaming = [];
  for await (const m of readUIMessageStream({ stream, onError: (e) => errors.push(String(e)), terminateOnError: true })) {
    message = m;
    for (const p of m.parts) {
      if (p.state === "input-streaming") streaming.push({ toolCallId: p.toolCallId, input: p.input ?? null });
    }
  }
  if (errors.length) fail(`readUIMessageStream: ${errors.join("; ")}`);
  process.stdout.write(JSON.stringify({ chunks: chunks.length, done, message, deltas, streaming }) + "\n");
} else if (format === "ag-ui") {
  const { EventSchemas } = await import("@ag-ui/core/schemas");
  const events = [];
  for (const data of datas) {
    const parsed = EventSchemas.safeParse(JSON.parse(data));
    if (!parsed.success) fail(`not an AG-UI event: ${data}: ${JSON.stringify(parsed.error.issues)}`);
    events.push(parsed.data);
  }
  process.stdout.write(JSON.stringify({ events }) + "\n");
} else {
  fail(`usage: node check.mjs ai-sdk|ag-ui < sse-body`);
}
