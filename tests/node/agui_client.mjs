// @ag-ui/client's HttpAgent against a live server: a message, an interrupt, resume, abortRun.
// Env: AGUI_URL (the endpoint), AGUI_TOKEN (a DRF token), AGUI_ORDER (an order to cancel).
// Prints one JSON report on stdout; tests/surfaces/test_agui_http.py reads it and checks the database.
import { HttpAgent, randomUUID } from "@ag-ui/client";

const { AGUI_URL: url, AGUI_TOKEN: token, AGUI_ORDER: order } = process.env;

function agent() {
  return new HttpAgent({ url, headers: { Authorization: `Bearer ${token}` } });
}

function say(client, text) {
  client.addMessage({ id: randomUUID(), role: "user", content: text });
}

async function run(client, parameters = {}, subscriber = {}) {
  const seen = { types: [], results: [], text: "", finished: null, error: null };
  const result = await client.runAgent(parameters, {
    onEvent: ({ event }) => {
      seen.types.push(event.type);
    },
    onTextMessageContentEvent: ({ event }) => {
      seen.text += event.delta;
    },
    onToolCallResultEvent: ({ event }) => {
      seen.results.push(event.content);
    },
    onRunFinishedEvent: ({ outcome, interrupts }) => {
      seen.finished = { outcome, interrupts: interrupts ?? [] };
    },
    onRunErrorEvent: ({ event }) => {
      seen.error = event.code ?? event.message;
    },
    ...subscriber,
  });
  seen.roles = result.newMessages.map((message) => message.role);
  return seen;
}

const report = {};

const chat = agent();
say(chat, "ping");
report.message = await run(chat);
say(chat, "ping"); // the agent resends its whole history, tool results included
report.again = await run(chat);
report.again.thread = chat.threadId;

const approver = agent();
say(approver, `cancel order ${order}`);
report.interrupt = await run(approver);
report.interrupt.pending = approver.pendingInterrupts.map((interrupt) => interrupt.id);
const [asked] = report.interrupt.finished.interrupts;
report.resume = await run(approver, {
  resume: [{ interruptId: asked.id, status: "resolved", payload: { approved: true } }],
});

const aborter = agent();
say(aborter, "slow seconds=30");
report.abort = await run(aborter, {}, { onToolCallEndEvent: () => aborter.abortRun() });
report.abort.thread = aborter.threadId;

console.log(JSON.stringify(report));
