// Produce N messages with the npm rocketmq-client-nodejs Producer, receive and ack them with
// its SimpleConsumer, and print one JSON line: what was sent and what was received.
//
// usage: node produce_consume.mjs ENDPOINT TOPIC GROUP TAG COUNT
// The package is loaded from $POPFLEET_NODE_CLIENT_DIR (default
// ~/.cache/popfleet/node-client-1.0.8, made by `make node-client`). The topic and group must
// exist already. Plaintext, no credentials, loopback only: the endpoint is an IP literal (no DNS
// lookup), and the client's own logger (a file under ~/logs) is replaced by one on stderr.
// The client's only host probe is a MAC address read from os.networkInterfaces() (no traffic).
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

const OVERALL_TIMEOUT_MS = 45000;
const [endpoint, topic, group, tag, countArg] = process.argv.slice(2);
if (!endpoint || !topic || !group || !tag || !countArg) {
  console.error('usage: node produce_consume.mjs ENDPOINT TOPIC GROUP TAG COUNT');
  process.exit(64);
}
const count = Number.parseInt(countArg, 10);

const overall = setTimeout(() => {
  console.error(`produce_consume: overall timeout of ${OVERALL_TIMEOUT_MS} ms`);
  process.exit(3);
}, OVERALL_TIMEOUT_MS);

const clientDir = process.env.POPFLEET_NODE_CLIENT_DIR
  ?? path.join(os.homedir(), '.cache', 'popfleet', 'node-client-1.0.8');
const require = createRequire(path.join(clientDir, 'package.json'));
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const log = (level) => (...args) => console.error(`[client ${level}]`, ...args);
const logger = { info: log('info'), warn: log('warn'), error: log('error'), debug() {} };
const common = { endpoints: endpoint, namespace: '', requestTimeout: 5000, logger };

const producer = new Producer({ ...common, topic });
const consumer = new SimpleConsumer({
  ...common,
  consumerGroup: group,
  subscriptions: new Map().set(topic, tag),
  awaitDuration: 3000,
});

const result = { sent: [], received: [], errors: [] };
try {
  await producer.startup();
  for (let i = 0; i < count; i++) {
    const body = `node-${i}-${Date.now()}`;
    const keys = [`key-${i}`];
    const receipt = await producer.send({ topic, tag, keys, body: Buffer.from(body) });
    result.sent.push({ messageId: receipt.messageId, body, tag, keys });
  }
  await consumer.startup();
  const deadline = Date.now() + 30000;
  while (result.received.length < count && Date.now() < deadline) {
    const messages = await consumer.receive(16, 30000);
    for (const m of messages) {
      result.received.push({
        messageId: m.messageId,
        body: m.body.toString(),
        tag: m.tag ?? null,
        keys: m.keys,
        topic: m.topic,
        deliveryAttempt: m.deliveryAttempt ?? null,
        corrupted: m.corrupted === true, // the client sets it only when the digest mismatches
      });
      await consumer.ack(m);
    }
  }
} catch (err) {
  result.errors.push(String(err?.stack ?? err));
} finally {
  for (const client of [consumer, producer]) {
    try {
      await client.shutdown();
    } catch (err) {
      result.errors.push(`shutdown: ${String(err)}`);
    }
  }
}
clearTimeout(overall);
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(result.errors.length === 0 ? 0 : 1);
