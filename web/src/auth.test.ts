import { describe, expect, it } from 'vitest';
import { ApiError } from './api';
import { AUDIT_PAGE, auditFiltersFrom, auditQuery, diffValues, flatten, sinceMs } from './audit';
import { capabilities, loginHref, safeNext, selectorText, tokenFromHash } from './auth';
import { loginError } from './components/Login';
import { tokenErrors, tokenRequest } from './components/Tokens';
import { formatRelative } from './format';
import { parseRoute } from './route';

describe('roles', () => {
  // What each role is offered; the collector's role.go decides the same on every route.
  const table: [string, string[]][] = [
    ['customer', []],
    ['viewer', ['readOverrides', 'readRules', 'readAudit', 'readExport']],
    ['operator', ['readOverrides', 'readRules', 'readAudit', 'readExport', 'editThresholds', 'editRules', 'actOnAlerts', 'expand', 'readClaims']],
    ['admin', ['readOverrides', 'readRules', 'readAudit', 'readExport', 'editThresholds', 'editRules', 'actOnAlerts', 'expand', 'readClaims', 'manageTokens', 'manageNodes', 'bindLabels']],
    ['superuser', []],
    ['', []],
  ];
  it.each(table)('%s may %j', (role, allowed) => {
    const can = capabilities(role);
    expect(
      Object.entries(can)
        .filter(([, v]) => v)
        .map(([k]) => k)
        .sort(),
    ).toEqual([...allowed].sort());
  });

  it('prints a selector as the collector does', () => {
    expect(selectorText({ region: 'eu', customer: 'acme' })).toBe('customer=acme,region=eu');
    expect(selectorText(undefined)).toBe('');
  });
});

describe('login', () => {
  it('reads the token from a login link fragment', () => {
    expect(tokenFromHash('#token=nbs_abc234')).toBe('nbs_abc234');
    expect(tokenFromHash('token=nbs_abc234&x=1')).toBe('nbs_abc234');
    expect(tokenFromHash('#token=%20nbs_abc%20')).toBe('nbs_abc');
    expect(tokenFromHash('#token=')).toBeNull();
    expect(tokenFromHash('#main')).toBeNull();
    expect(tokenFromHash('')).toBeNull();
  });

  it('goes back only to a path of this origin', () => {
    expect(safeNext('/nodes/lab-b?metric=tcp_reset%2Fsent')).toBe('/nodes/lab-b?metric=tcp_reset%2Fsent');
    expect(safeNext('/alerts#x')).toBe('/alerts#x');
    for (const bad of [null, '', 'nodes', '//evil.example/x', '/\\evil.example', 'https://evil.example/', 'javascript:alert(1)', '/login', '/login?next=/x', '/a\nb', '/' + 'x'.repeat(2001)]) {
      expect(safeNext(bad), String(bad)).toBe('/');
    }
  });

  it('links to the login page with the way back', () => {
    expect(loginHref('/nodes/lab-b?metric=m')).toBe('/login?next=%2Fnodes%2Flab-b%3Fmetric%3Dm');
    expect(loginHref('/')).toBe('/login');
    expect(loginHref('//evil.example')).toBe('/login');
    expect(loginHref('/alerts', 'ended')).toBe('/login?next=%2Falerts&reason=ended');
    expect(loginHref('/', 'signed-out')).toBe('/login?reason=signed-out');
    expect(parseRoute('/login', '?next=%2Falerts')).toMatchObject({ page: 'login' });
    expect(parseRoute('/audit', '?kind=token').page).toBe('audit');
    expect(parseRoute('/tokens/', '').page).toBe('tokens');
  });

  it('says what a failed sign-in means', () => {
    expect(loginError(new ApiError(401, 'unauthorized', 'token "x" was revoked: unauthenticated'))).toMatch(/^This token is not valid or has expired/);
    expect(loginError(new ApiError(403, 'forbidden', 'cross-origin POST refused'))).toBe('cross-origin POST refused');
    expect(loginError(new ApiError(0, 'network', 'Cannot reach the collector (x).'))).toBe('Cannot reach the collector (x).');
  });
});

describe('audit log', () => {
  it('keeps its filters in the URL, within the collector limits', () => {
    expect(auditFiltersFrom(new URLSearchParams())).toEqual({ kind: '', id: '', since: '', limit: AUDIT_PAGE });
    expect(auditFiltersFrom(new URLSearchParams('kind=threshold&id=7&since=24h&limit=5000'))).toEqual({ kind: 'threshold', id: '7', since: '24h', limit: 1000 });
    expect(auditFiltersFrom(new URLSearchParams('since=yesterday&limit=-1'))).toMatchObject({ since: '', limit: AUDIT_PAGE });
    const now = Date.parse('2026-03-01T12:00:00Z');
    expect(sinceMs('90m', now)).toBe(now - 90 * 60_000);
    expect(sinceMs('7d', now)).toBe(now - 7 * 86_400_000);
    expect(sinceMs('2026-02-01T00:00:00Z', now)).toBe(Date.parse('2026-02-01T00:00:00Z'));
    expect(sinceMs('0h', now)).toBeUndefined();
    expect(auditQuery({ kind: 'token', id: '', since: '1h', limit: 100 }, now)).toEqual({ object_kind: 'token', object_id: undefined, since: now - 3_600_000, limit: 100 });
  });

  it('flattens a value into paths, arrays of scalars kept whole', () => {
    expect([...flatten({ scope: { kind: 'node', node: 'lab-b' }, threshold: { warn: 1 }, group_by: ['rack'], labels: {}, x: [{ a: 1 }] })]).toEqual([
      ['scope.kind', '"node"'],
      ['scope.node', '"lab-b"'],
      ['threshold.warn', '1'],
      ['group_by', '["rack"]'],
      ['labels', '{}'],
      ['x[0].a', '1'],
    ]);
    expect([...flatten(42)]).toEqual([['', '42']]);
  });

  it('shows what changed: all of a creation, all of a deletion, the differences of an update', () => {
    const before = { metric: 'tcp_reset/sent', threshold: { warn: 1, crit: 10 }, comment: 'x' };
    const after = { metric: 'tcp_reset/sent', threshold: { warn: 1234, crit: 10 }, disabled: false };
    expect(diffValues(before, after)).toEqual({
      changes: [
        { path: 'threshold.warn', kind: 'changed', old: '1', new: '1234' },
        { path: 'disabled', kind: 'added', new: 'false' },
        { path: 'comment', kind: 'removed', old: '"x"' },
      ],
      unchanged: 2,
    });
    expect(diffValues(null, { name: 'a' })).toEqual({ changes: [{ path: 'name', kind: 'added', new: '"a"' }], unchanged: 0 });
    expect(diffValues({ name: 'a' }, null)).toEqual({ changes: [{ path: 'name', kind: 'removed', old: '"a"' }], unchanged: 0 });
    expect(diffValues(null, null)).toEqual({ changes: [], unchanged: 0 });
    expect(diffValues('on', 'off').changes).toEqual([{ path: '', kind: 'changed', old: '"on"', new: '"off"' }]);
  });
});

describe('tokens', () => {
  it('builds the create request and checks its form', () => {
    expect(tokenRequest({ name: ' alice ', role: 'operator', selector: 'customer=acme', expires: '' })).toEqual({ req: { name: 'alice', role: 'operator' }, errors: {} });
    expect(tokenRequest({ name: 'acme-portal', role: 'customer', selector: 'customer=acme, region=eu', expires: '30d' }).req).toEqual({
      name: 'acme-portal',
      role: 'customer',
      selector: { customer: 'acme', region: 'eu' },
      expires_in: '30d',
    });
    expect(tokenRequest({ name: 'x', role: 'viewer', selector: '', expires: '1h30m' }).req?.expires_in).toBe('1h30m');
    const bad = tokenRequest({ name: '', role: 'customer', selector: '', expires: 'soon' });
    expect(bad.req).toBeUndefined();
    expect(Object.keys(bad.errors).sort()).toEqual(['expires', 'name', 'selector']);
    expect(tokenRequest({ name: 'x', role: 'customer', selector: 'acme', expires: '' }).errors.selector).toMatch(/not label=value/);
  });

  it('puts the collector messages by field', () => {
    const msg = [
      'invalid: token name "a/b": 1 to 64 characters of letters, digits and . _ @ : + - (spaces inside)',
      'invalid: selector label "Customer" is not a label key (lower case letters, digits, _; at most 63)',
      'invalid: expiry 8760h0m0s must be from 1m to 4380h0m0s (--auth.token-max-ttl)',
      'invalid: something else',
    ].join('\n');
    const e = tokenErrors(new ApiError(400, 'bad_request', msg));
    expect(e.name).toMatch(/^token name "a\/b"/);
    expect(e.selector).toMatch(/^selector label "Customer"/);
    expect(e.expires).toMatch(/^expiry/);
    expect(e.form).toBe('something else');
    expect(tokenErrors(new ApiError(409, 'conflict', 'a live token named "alice" exists already; revoke it first: conflict')).name).toMatch(/exists already/);
    expect(tokenErrors(new ApiError(409, 'conflict', '1000 live tokens is the limit (--auth.max-tokens); revoke some first: conflict')).form).toMatch(/is the limit/);
  });

  it('says when a time lies ahead', () => {
    const now = Date.parse('2026-03-01T12:00:00Z');
    expect(formatRelative('2026-03-04T12:00:00Z', now)).toBe('in 3 d');
    expect(formatRelative('2026-03-01T11:00:00Z', now)).toBe('1 h ago');
    expect(formatRelative(null, now)).toBe('never');
  });
});
