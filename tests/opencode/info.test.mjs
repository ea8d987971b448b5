// What OpenCode's clients read at start (config, providers, agents, paths, the project, commands)
// and running a command: the real V1 and V2 SDK clients and the CLI against Switchboard.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { CASE, HOOK, must, runAttached, scriptedConfig, serverFor, startServer, stopServer, v1, v2 } from './harness.mjs';

const SECRETS = ['sk-test-SECRET-1', 'SECRET-header-2', 'SECRET-env-3', 'SECRET-password-4',
  'SECRET-url-5', 'SECRET-query-6', 'SECRET-argv-7', 'SECRET-mcp-url-8'];

// Two answers per session at most; every command or prompt below runs in a session of its own.
const config = () =>
  scriptedConfig([{ text: 'answered' }], {
    provider: {
      sb: { type: 'scripted', script: [{ text: 'answered' }] },
      // Never called: it shows how an HTTP provider is listed, with a key that must not show.
      remote: { type: 'openai-compatible', baseURL: `http://user:${SECRETS[4]}@127.0.0.1:9/v1?key=${SECRETS[5]}`, apiKey: SECRETS[0],
                models: ['m1', 'm2'], headers: { 'X-Api-Key': SECRETS[1] } },
    },
    mcp: {
      tools: { type: 'local', command: ['false'], environment: { API_TOKEN: SECRETS[2] }, enabled: false },
      keyed: { type: 'local', command: ['false', '--api-key', SECRETS[6]], enabled: false },
      hosted: { type: 'remote', url: `http://me:${SECRETS[7]}@127.0.0.1:9/mcp?token=${SECRETS[7]}`, enabled: false },
    },
    server: { password: SECRETS[3] },
    agent: { review: { description: 'Reviews code', prompt: 'You review.', steps: 7, tools: { bash: false } } },
    command: {
      greet: { template: 'Greet $1, then $2.', description: 'Greets two people' },
      review: { template: 'Review $ARGUMENTS', agent: 'plan' },
      lost: { template: 'x', agent: 'nobody' },
    },
  });

// The server's password: every route asks for it.
const auth = { headers: { Authorization: `Bearer ${SECRETS[3]}` } };

describe('OpenCode clients read what Switchboard has', () => {
  const h = serverFor(before, after, config);
  const c1 = () => v1(h.server, auth);
  const c2 = () => v2(h.server, auth);

  it('GET /config: the effective config in OpenCode\'s shape, no secret in it', CASE, async () => {
    for (const cfg of [must(await c1().config.get(), 'v1 config.get'), must(await c2().config.get(), 'v2 config.get')]) {
      const text = JSON.stringify(cfg);
      for (const secret of SECRETS) assert.ok(!text.includes(secret), `${secret} in ${text}`);
      assert.equal(cfg.model, 'sb/default');
      assert.equal(cfg.default_agent, 'build');
      assert.equal(cfg.provider.remote.options.baseURL, 'http://[redacted]@127.0.0.1:9/v1?key=[redacted]');
      assert.equal(cfg.provider.remote.options.apiKey, '[redacted]');
      assert.equal(cfg.provider.remote.options.headers['X-Api-Key'], '[redacted]');
      assert.equal(cfg.provider.remote.npm, '@ai-sdk/openai-compatible');
      assert.deepEqual(Object.keys(cfg.provider.remote.models), ['m1', 'm2']);
      assert.equal(cfg.mcp.tools.environment.API_TOKEN, '[redacted]');
      assert.deepEqual(cfg.mcp.keyed.command, ['false', '[redacted]', '[redacted]']);
      assert.equal(cfg.mcp.hosted.url, 'http://[redacted]@127.0.0.1:9/mcp?token=[redacted]');
      assert.equal(cfg.server.password, '[redacted]');
      assert.equal(cfg.agent.review.steps, 7);
      assert.deepEqual(cfg.command.review, { template: 'Review $ARGUMENTS', agent: 'plan' });
      assert.equal(cfg.clientTools.defaultTimeout, 30000); // Switchboard's own, defaults filled
    }
  });

  it('GET /config/providers and GET /provider: OpenCode\'s Provider and Model objects', CASE, async () => {
    const listed = must(await c1().config.providers(), 'v1 config.providers');
    assert.deepEqual(listed.default, must(await c2().config.providers(), 'v2 config.providers').default);
    assert.equal(listed.default.sb, 'default');
    assert.equal(listed.default.remote, 'm1');
    const remote = listed.providers.find((p) => p.id === 'remote');
    assert.equal(remote.source, 'config');
    const baseURL = 'http://[redacted]@127.0.0.1:9/v1?key=[redacted]';
    assert.deepEqual(remote.options, { baseURL });
    const m = remote.models.m2;
    assert.equal(m.id, 'm2');
    assert.equal(m.providerID, 'remote');
    assert.deepEqual(m.api, { id: 'm2', url: baseURL, npm: '@ai-sdk/openai-compatible' });
    assert.equal(m.capabilities.toolcall, true);
    assert.equal(m.capabilities.input.text, true);
    assert.deepEqual(m.cost, { input: 0, output: 0, cache: { read: 0, write: 0 } }); // unknown: zero
    assert.deepEqual(m.limit, { context: 0, output: 0 });
    assert.equal(m.status, 'active');
    for (const secret of SECRETS) assert.ok(!JSON.stringify(listed).includes(secret), secret);

    for (const all of [must(await c1().provider.list(), 'v1 provider.list'), must(await c2().provider.list(), 'v2 provider.list')]) {
      assert.deepEqual(all.all.map((p) => p.id).sort(), ['remote', 'sb', 'scripted']);
      assert.deepEqual([...all.connected].sort(), ['remote', 'sb', 'scripted']);
      assert.equal(all.default.sb, 'default');
      assert.ok(all.all.find((p) => p.id === 'sb').models.default);
      for (const secret of SECRETS) assert.ok(!JSON.stringify(all).includes(secret));
    }
    assert.deepEqual(must(await c1().provider.auth(), 'provider.auth'), {});
  });

  it('GET /agent: the agents with their modes and permissions', CASE, async () => {
    for (const agents of [must(await c1().app.agents(), 'v1 app.agents'), must(await c2().app.agents(), 'v2 app.agents')]) {
      const byName = Object.fromEntries(agents.map((a) => [a.name, a]));
      assert.deepEqual(Object.keys(byName).sort(), ['build', 'plan', 'review']);
      assert.equal(byName.build.native, true);
      assert.equal(byName.review.native, false);
      for (const a of agents) {
        assert.equal(a.mode, 'all');
        assert.deepEqual(a.options, {});
      }
      const denies = (a, p) => a.permission.some((r) => r.permission === p && r.pattern === '*' && r.action === 'deny');
      assert.ok(denies(byName.plan, 'edit') && denies(byName.plan, 'bash'), JSON.stringify(byName.plan));
      assert.ok(denies(byName.review, 'bash'), JSON.stringify(byName.review)); // tools: {bash: false}
      assert.ok(!denies(byName.build, 'bash'));
      assert.equal(byName.review.prompt, 'You review.');
      assert.equal(byName.review.steps, 7);
    }
  });

  it('GET /path, /project/current, /project, /vcs: the server\'s directories and project', CASE, async () => {
    const path = must(await c1().path.get(), 'v1 path.get');
    assert.deepEqual(must(await c2().path.get(), 'v2 path.get'), path);
    assert.equal(path.directory, h.server.work);
    assert.equal(path.state, `${h.server.work}/data`);
    assert.equal(path.home, `${h.server.work}/home`);
    assert.equal(path.config, `${h.server.work}/home/.config/switchboard`);
    assert.equal(path.worktree, '/'); // not a git repository
    const project = must(await c1().project.current(), 'v1 project.current');
    assert.deepEqual(must(await c2().project.current(), 'v2 project.current'), project);
    assert.equal(project.id, 'global');
    assert.equal(project.worktree, '/');
    assert.deepEqual(project.sandboxes, []);
    assert.equal(typeof project.time.created, 'number');
    assert.deepEqual(must(await c1().project.list(), 'project.list'), [project]);
    assert.deepEqual(must(await c2().vcs.get(), 'vcs.get'), { branch: null, default_branch: null });
  });

  it('GET /command: the config\'s commands with their placeholders', CASE, async () => {
    const commands = must(await c1().command.list(), 'v1 command.list');
    assert.deepEqual(must(await c2().command.list(), 'v2 command.list'), commands);
    const greet = commands.find((c) => c.name === 'greet');
    assert.deepEqual(greet, { name: 'greet', source: 'command', description: 'Greets two people',
                              template: 'Greet $1, then $2.', hints: ['$1', '$2'] });
    assert.deepEqual(commands.find((c) => c.name === 'review').hints, ['$ARGUMENTS']);
    assert.equal(commands.find((c) => c.name === 'review').agent, 'plan');
  });

  it('POST /session/{id}/command: the template, filled, prompted with the command\'s agent', CASE, async () => {
    const client = c1();
    const session = must(await client.session.create({ body: {} }), 'session.create');
    const events = [];
    const stream = await client.event.subscribe();
    const reading = (async () => {
      for await (const e of stream.stream) {
        events.push(e);
        if (e.type === 'command.executed') break;
      }
    })();
    const answer = must(await client.session.command({ path: { id: session.id },
      body: { command: 'review', arguments: 'src/a.ts "and b"' } }), 'session.command');
    assert.equal(answer.info.role, 'assistant');
    assert.equal(answer.info.agent ?? answer.info.mode, 'plan');
    assert.equal(answer.parts.find((p) => p.type === 'text').text, 'answered');
    const messages = must(await client.session.messages({ path: { id: session.id } }), 'session.messages');
    assert.equal(messages[0].parts[0].text, 'Review src/a.ts "and b"');
    await reading;
    const done = events.find((e) => e.type === 'command.executed');
    assert.deepEqual(done.properties, { name: 'review', sessionID: session.id, arguments: 'src/a.ts "and b"',
                                        messageID: answer.info.id });

    // V2: $1 takes one word, the last placeholder the rest.
    const s2 = must(await c2().session.create({}), 'v2 session.create');
    must(await c2().session.command({ sessionID: s2.id, command: 'greet', arguments: 'Ann Bob "and Cy"' }), 'v2 session.command');
    const m2 = must(await c2().session.messages({ sessionID: s2.id }), 'v2 session.messages');
    assert.equal(m2[0].parts[0].text, 'Greet Ann, then Bob and Cy.');
  });

  it('an unknown command is a 404, a command naming an unknown agent a 400 naming it', CASE, async () => {
    const client = c1();
    const session = must(await client.session.create({ body: {} }), 'session.create');
    const missing = await client.session.command({ path: { id: session.id }, body: { command: 'nope', arguments: '' } });
    assert.equal(missing.response.status, 404);
    assert.match(JSON.stringify(missing.error), /no command \\"nope\\"/);
    const lost = await client.session.command({ path: { id: session.id }, body: { command: 'lost', arguments: '' } });
    assert.equal(lost.response.status, 400);
    assert.match(JSON.stringify(lost.error), /Unknown agent: nobody \(command\.lost\.agent\)/);
    const messages = must(await client.session.messages({ path: { id: session.id } }), 'session.messages');
    assert.deepEqual(messages, []);
  });

  it('the routes for features Switchboard lacks answer as OpenCode\'s with them off', CASE, async () => {
    const get = async (path) => {
      const res = await fetch(h.server.url + path, auth);
      assert.equal(res.status, 200, path);
      return res.json();
    };
    assert.deepEqual(await get('/lsp'), []);
    assert.deepEqual(await get('/formatter'), []);
    assert.deepEqual(await get('/skill'), []);
    assert.deepEqual(await get('/project/global/directories'), []);
    assert.deepEqual(await get('/experimental/capabilities'), { backgroundSubagents: false });
    assert.deepEqual(await get('/experimental/console'), { consoleManagedProviders: [], switchableOrgCount: 0 });
    assert.deepEqual(await get('/experimental/resource'), {});
    assert.deepEqual(await get('/experimental/workspace'), []);
    assert.deepEqual(await get('/experimental/workspace/status'), []);
  });
});

// What the CLI prints is cli.test.mjs's; here, what reached the server.
describe('the CLI: --agent and --command', () => {
  const h = serverFor(before, after, () =>
    scriptedConfig([{ text: 'cli answer' }], {
      command: { greet: { template: 'Greet $1 and $2', agent: 'plan' } },
    }));
  const messagesOf = async (sessionID) => must(await v2(h.server).session.messages({ sessionID }), 'messages');
  const lastSession = async () => must(await v2(h.server).session.list(), 'session.list')[0];

  it('`--agent plan` runs the turn with plan', CASE, async () => {
    const r = await runAttached(h.server, ['--agent', 'plan', 'plan something']);
    assert.equal(r.code, 0, r.stderr);
    const messages = await messagesOf((await lastSession()).id);
    assert.equal(messages[0].info.agent, 'plan');
    assert.equal(messages.at(-1).info.agent ?? messages.at(-1).info.mode, 'plan');
  });

  it('`--command greet Ann Bob` runs the command', CASE, async () => {
    const r = await runAttached(h.server, ['--command', 'greet', 'Ann', 'Bob']);
    assert.equal(r.code, 0, r.stderr);
    const messages = await messagesOf((await lastSession()).id);
    assert.equal(messages[0].parts[0].text, 'Greet Ann and Bob');
    assert.equal(messages[0].info.agent, 'plan');
    assert.equal(messages.at(-1).parts.find((p) => p.type === 'text').text, 'cli answer');
  });

  it('an unknown agent: the CLI says so and falls back to build', CASE, async () => {
    const r = await runAttached(h.server, ['--agent', 'nobody', 'hello']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout + r.stderr, /agent "nobody" not found/);
    const messages = await messagesOf((await lastSession()).id);
    assert.equal(messages[0].info.agent, 'build');
  });
});

describe('GET /vcs, /path and /project/current in a git repository', () => {
  const holder = {};
  before(async () => {
    const work = mkdtempSync(join(tmpdir(), 'sb-opencode-git-'));
    const git = (...args) => execFileSync('git', ['-C', work, ...args], { stdio: 'pipe' }).toString().trim();
    git('init', '-q', '-b', 'trunk');
    git('-c', 'user.email=t@t', '-c', 'user.name=t', 'commit', '-q', '--allow-empty', '-m', 'first');
    git('checkout', '-q', '-b', 'feature');
    mkdirSync(join(work, '.git', 'refs', 'remotes', 'origin'), { recursive: true });
    writeFileSync(join(work, '.git', 'refs', 'remotes', 'origin', 'HEAD'), 'ref: refs/remotes/origin/trunk\n');
    holder.root = git('rev-list', '--max-parents=0', 'HEAD');
    holder.server = await startServer(scriptedConfig([{ text: 'x' }]), work);
  }, HOOK);
  after(() => holder.server && stopServer(holder.server).finally(() => holder.server.remove()), HOOK);

  it('name its branch, default branch, top directory and project id', CASE, async () => {
    const c = v2(holder.server);
    assert.deepEqual(must(await c.vcs.get(), 'vcs.get'), { branch: 'feature', default_branch: 'trunk' });
    const project = must(await c.project.current(), 'project.current');
    assert.equal(project.id, holder.root);
    assert.equal(project.worktree, holder.server.work);
    assert.equal(project.vcs, 'git');
    assert.equal(must(await c.path.get(), 'path.get').worktree, holder.server.work);
  });
});
