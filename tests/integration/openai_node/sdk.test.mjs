// kvserve serve, driven by the official OpenAI Node SDK (black box: a real server process).
// Run by tests/integration/serve_test.sh, which starts the server and sets:
//   KVSERVE_BASE_URL  http://127.0.0.1:PORT
//   KVSERVE_API_KEY   the server's --api-key
//   KVSERVE_MODEL     the served model name
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.KVSERVE_BASE_URL;
const apiKey = process.env.KVSERVE_API_KEY;
const model = process.env.KVSERVE_MODEL;
assert.ok(baseURL && apiKey && model, 'KVSERVE_BASE_URL, KVSERVE_API_KEY and KVSERVE_MODEL must be set');

const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
// Greedy and long enough to be interesting; ignore_eos is SGLang's extension, passed through.
const greedy = { temperature: 0, ignore_eos: true };

async function serverInfo() {
  const res = await fetch(`${baseURL}/get_server_info`, {
    headers: { Authorization: `Bearer ${apiKey}` },
  });
  assert.equal(res.status, 200);
  return res.json();
}

async function waitIdle() {
  for (let i = 0; i < 200; i++) {
    const info = await serverInfo();
    if (info.num_running_reqs === 0 && info.num_waiting_reqs === 0 && info.used_tokens === 0) {
      return info;
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail('the server did not become idle');
}

test('models.list names the served model', async () => {
  const page = await client.models.list();
  assert.deepEqual(page.data.map((m) => m.id), [model]);
  assert.equal(page.data[0].object, 'model');
});

test('completions: streaming and not give the same text', async () => {
  const prompt = 'The quick brown fox';
  const full = await client.completions.create({ model, prompt, max_tokens: 12, ...greedy });
  assert.equal(full.object, 'text_completion');
  assert.equal(full.choices.length, 1);
  assert.equal(full.choices[0].finish_reason, 'length');
  assert.equal(full.usage.completion_tokens, 12);
  assert.ok(full.usage.prompt_tokens > 0);
  assert.equal(full.usage.total_tokens, full.usage.prompt_tokens + 12);
  assert.ok(full.choices[0].text.length > 0);

  const stream = await client.completions.create({
    model, prompt, max_tokens: 12, stream: true, stream_options: { include_usage: true }, ...greedy,
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, full.choices[0].text);
  assert.equal(finish, 'length');
  assert.deepEqual(
    [usage.prompt_tokens, usage.completion_tokens],
    [full.usage.prompt_tokens, full.usage.completion_tokens]);
});

test('completions: n, seed and logprobs', async () => {
  const base = { model, prompt: 'Once upon a time', max_tokens: 8, temperature: 1.0, ignore_eos: true };
  const a = await client.completions.create({ ...base, n: 3, seed: 7, logprobs: 2 });
  const b = await client.completions.create({ ...base, n: 3, seed: 7, logprobs: 2 });
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index).sort(), [0, 1, 2]);
  // The same seed reproduces the same samples.
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  for (const c of a.choices) {
    assert.equal(c.logprobs.tokens.length, 8);
    assert.equal(c.logprobs.token_logprobs.length, 8);
    for (const lp of c.logprobs.token_logprobs) assert.ok(lp <= 0);
    for (const top of c.logprobs.top_logprobs) assert.equal(Object.keys(top).length, 2);
  }
  assert.equal(a.usage.completion_tokens, 24);
});

test('chat: the model chat template, streaming and not give the same message', async () => {
  const messages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Name three colours.' },
  ];
  const full = await client.chat.completions.create({ model, messages, max_tokens: 10, ...greedy });
  assert.equal(full.object, 'chat.completion');
  assert.equal(full.choices[0].message.role, 'assistant');
  assert.equal(typeof full.choices[0].message.content, 'string');
  assert.equal(full.choices[0].finish_reason, 'length');
  assert.equal(full.usage.completion_tokens, 10);

  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 10, stream: true, stream_options: { include_usage: true }, ...greedy,
  });
  let content = '';
  let role = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) content += c.delta.content;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(role, 'assistant');
  assert.equal(content, full.choices[0].message.content);
  assert.equal(usage.completion_tokens, 10);
  assert.equal(usage.prompt_tokens, full.usage.prompt_tokens);

  // The SDK's streaming helper assembles the same message.
  const runner = client.chat.completions.stream({ model, messages, max_tokens: 10, ...greedy });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, full.choices[0].message.content);
});

test('stop sequences end the text before the stop string', async () => {
  const prompt = 'Counting:';
  const free = await client.completions.create({ model, prompt, max_tokens: 16, ...greedy });
  const text = free.choices[0].text;
  // Stop at a piece of the greedy continuation: the output is exactly what precedes it.
  const stop = text.slice(4, 6);
  assert.ok(stop.length > 0, `continuation too short: ${JSON.stringify(text)}`);
  const stopped = await client.completions.create({ model, prompt, max_tokens: 16, stop: [stop], ...greedy });
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  assert.equal(stopped.choices[0].text, text.slice(0, text.indexOf(stop)));
});

test('errors are OpenAI errors the SDK understands', async () => {
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /max_tokens/.test(e.message));
  await assert.rejects(
    client.chat.completions.create({ model, messages: 'not a list' }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
  await assert.rejects(
    client.completions.create({ model, prompt: 'x'.repeat(100_000), max_tokens: 1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
  const wrongKey = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

test('aborting a stream aborts the request and frees its memory', async () => {
  const aborted = async () => {
    const res = await fetch(`${baseURL}/metrics`, { headers: { Authorization: `Bearer ${apiKey}` } });
    const m = (await res.text()).match(/^kvserve:num_aborted_requests_total\{[^}]*\} (\d+)$/m);
    assert.ok(m, 'no kvserve:num_aborted_requests_total in /metrics');
    return Number(m[1]);
  };
  await waitIdle();
  const before = await aborted();
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model, prompt: 'A long story:', max_tokens: 2000, stream: true, ...greedy },
    { signal: controller.signal });
  let chunks = 0;
  try {
    // The SDK ends the iteration quietly (or with APIUserAbortError) once the signal fires.
    for await (const chunk of stream) {
      if (chunk.choices.length && ++chunks === 3) controller.abort();
    }
  } catch (e) {
    assert.equal(e.name, 'APIUserAbortError');
  }
  assert.ok(chunks >= 3 && chunks < 2000, `${chunks} chunks`);
  const info = await waitIdle();
  assert.equal(info.used_tokens, 0);
  assert.equal(await aborted(), before + 1);
});

test('16 concurrent chat requests equal the same requests one at a time', async () => {
  const ask = (i) => client.chat.completions.create({
    model, messages: [{ role: 'user', content: `Question number ${i}?` }], max_tokens: 8, ...greedy,
  });
  const alone = [];
  for (let i = 0; i < 16; i++) alone.push((await ask(i)).choices[0].message.content);
  const together = await Promise.all(Array.from({ length: 16 }, (_, i) => ask(i)));
  assert.deepEqual(together.map((r) => r.choices[0].message.content), alone);
});
