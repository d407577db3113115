// Drives listwatch with the official JavaScript Kubernetes client
// (npm @kubernetes/client-node, 1.x: object parameters, promise API).
//
// Usage: node js_client.mjs NODE_MODULES KUBECONFIG NAMESPACE
//
// NODE_MODULES is the directory the client was installed into (ES modules resolve bare
// imports from the script's own location, so the package is imported by path). Creates
// NAMESPACE, then creates, lists, patches (JSON patch and strategic merge) and deletes
// configmaps in it while a raw Watch and an informer (makeInformer) observe them. Prints one
// JSON object with what it observed on stdout; tests/clients.rs asserts on it. Exits
// non-zero with a message on stderr when a client call fails unexpectedly.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [nodeModules, kubeconfig, ns] = process.argv.slice(2);
if (!nodeModules || !kubeconfig || !ns) {
  console.error('usage: js_client.mjs NODE_MODULES KUBECONFIG NAMESPACE');
  process.exit(2);
}
const pkgDir = join(nodeModules, '@kubernetes', 'client-node');
const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
const k8s = await import(pathToFileURL(join(pkgDir, pkg.main)).href);

/** Resolves once `pred()` holds, polling every 20 ms; rejects after `ms` milliseconds. */
async function until(what, pred, ms = 15000) {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Runs `call`, which must reject with an ApiException; returns [code, Status reason]. */
async function statusOf(call) {
  try {
    await call();
  } catch (e) {
    if (!(e instanceof k8s.ApiException)) {
      throw e;
    }
    let body = e.body;
    if (typeof body === 'string') {
      try {
        body = JSON.parse(body);
      } catch {
        body = {};
      }
    }
    return [e.code, body?.reason ?? null];
  }
  throw new Error('expected an ApiException, the call succeeded');
}

function cm(name, labels, data) {
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, labels }, data };
}

const names = (items) => items.map((i) => i.metadata.name);

const kc = new k8s.KubeConfig();
kc.loadFromFile(kubeconfig);
const core = kc.makeApiClient(k8s.CoreV1Api);
const result = {};

const createdNs = await core.createNamespace({
  body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } },
});
result.namespace = createdNs.metadata.name;

const start = await core.listNamespacedConfigMap({ namespace: ns });
result.initialItems = names(start.items);
const rv0 = start.metadata.resourceVersion;

const path = `/api/v1/namespaces/${ns}/configmaps`;

// The client's raw Watch, from the list's resourceVersion.
const watched = [];
let watchDone = null;
const watch = new k8s.Watch(kc);
const watchAbort = await watch.watch(
  path,
  { resourceVersion: rv0 },
  (type, obj) => watched.push([type, obj.metadata.name, obj.metadata.resourceVersion]),
  (err) => {
    watchDone = err ? String(err) : 'closed';
  },
);

// Created before the informer starts, so that its initial list delivers it as an add.
await core.createNamespacedConfigMap({ namespace: ns, body: cm('zero', { app: 'other' }, { z: '0' }) });

// An informer: list, then watch from the list's resourceVersion.
const informed = [];
const informerErrors = [];
const informer = k8s.makeInformer(kc, path, () => core.listNamespacedConfigMap({ namespace: ns }));
informer.on('add', (o) => informed.push(['add', o.metadata.name]));
informer.on('update', (o) => informed.push(['update', o.metadata.name, o.data ?? null]));
informer.on('delete', (o) => informed.push(['delete', o.metadata.name]));
informer.on('error', (e) => informerErrors.push(String(e)));
await informer.start();

const one = await core.createNamespacedConfigMap({
  namespace: ns,
  body: cm('one', { app: 'js' }, { k1: 'v1' }),
});
result.createdOne = { uidSet: !!one.metadata.uid, rvSet: !!one.metadata.resourceVersion };
await core.createNamespacedConfigMap({ namespace: ns, body: cm('two', { app: 'other' }, { x: '0' }) });

result.selectorAppJs = names(
  (await core.listNamespacedConfigMap({ namespace: ns, labelSelector: 'app=js' })).items,
);
const page1 = await core.listNamespacedConfigMap({ namespace: ns, limit: 2 });
const page2 = await core.listNamespacedConfigMap({
  namespace: ns,
  limit: 2,
  _continue: page1.metadata._continue,
});
result.pages = [names(page1.items), names(page2.items)];
result.page2ContinueEmpty = !page2.metadata._continue;

// The generated client sends application/json-patch+json by default.
const jsonPatched = await core.patchNamespacedConfigMap({
  name: 'one',
  namespace: ns,
  body: [{ op: 'add', path: '/data/k2', value: 'v2' }],
});
result.jsonPatchedData = jsonPatched.data;
const smPatched = await core.patchNamespacedConfigMap(
  { name: 'two', namespace: ns, body: { metadata: { labels: { tier: 'web' } }, data: { y: '1' } } },
  k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
);
result.smPatchedData = smPatched.data;
result.smPatchedLabels = smPatched.metadata.labels;

await core.deleteNamespacedConfigMap({ name: 'one', namespace: ns });

result.missingRead = await statusOf(() => core.readNamespacedConfigMap({ name: 'nope', namespace: ns }));
result.duplicateCreate = await statusOf(() =>
  core.createNamespacedConfigMap({ namespace: ns, body: cm('two', {}, {}) }),
);

await until('the informer to see the delete', () => informed.some((e) => e[0] === 'delete'));
await until('the watch to see DELETED', () => watched.some((e) => e[0] === 'DELETED'));

result.informed = informed;
result.informerErrors = [...informerErrors];
result.watched = watched.map((e) => [e[0], e[1]]);
const rvs = watched.map((e) => BigInt(e[2]));
result.watchRvsIncreasing = rvs.every((r, i) => i === 0 || rvs[i - 1] < r);
result.watchDoneEarly = watchDone;

const listed = await core.listNamespacedConfigMap({ namespace: ns });
result.listAfterSync = names(listed.items).sort();
result.informerList = names(informer.list(ns)).sort();
result.informerTwoData = informer.get('two', ns)?.data ?? null;
result.informerTwoRvMatchesList =
  informer.get('two', ns)?.metadata.resourceVersion === listed.items.find((i) => i.metadata.name === 'two')?.metadata.resourceVersion;

await informer.stop();
watchAbort.abort();
process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(0));
