import { describe, expect, it } from 'vitest';
import { bootstrapErrors, bootstrapRequest, bootstrapState, claimText, claimsOf, labelsDraftOf, labelsRequest, moveText, retiredText, tenantKeyOf } from './tenancy';

describe('tenancy', () => {
  it('says what the agent claimed against what the operator bound', () => {
    const claims = claimsOf({ labels: { customer: 'acme', region: 'eu' }, claimed_labels: { region: 'us', customer: 'globex' } });
    expect(claims.map(claimText)).toEqual([
      'The agent claims customer=globex; the operator bound customer=acme; its claim is ignored.',
      'The agent claims region=us; the operator bound region=eu; its claim is ignored.',
    ]);
    // The tenant key is the operator's even when nothing is bound for it.
    expect(claimText(claimsOf({ labels: {}, claimed_labels: { customer: 'globex' } })[0])).toBe('The agent claims customer=globex; the operator bound no customer; its claim is ignored.');
    expect(claimsOf({ labels: { customer: 'acme' } })).toEqual([]);
    expect(claimsOf(undefined)).toEqual([]);
  });

  it('explains a node row that moved to another tenant, and only such a row', () => {
    expect(retiredText(undefined, String)).toBeNull();
    expect(retiredText('', String)).toBeNull();
    expect(retiredText('2025-03-04T10:00:00Z', () => '2025-03-04 11:00')).toBe('This node moved to another tenant on 2025-03-04 11:00; what is shown is what it reported before.');
  });

  it('finds the tenant label from the bound labels, defaulting to customer', () => {
    expect(tenantKeyOf([])).toEqual({ key: 'customer', guessed: true });
    expect(tenantKeyOf([{ tenant: '', bound_labels: { org: 'x' } }])).toEqual({ key: 'customer', guessed: true });
    expect(tenantKeyOf([{ tenant: 'acme', bound_labels: { org: 'acme', region: 'eu' } }, { tenant: 'globex', bound_labels: { org: 'globex', team: 'globex' } }])).toEqual({ key: 'org', guessed: false });
    expect(tenantKeyOf([{ tenant: 'acme', bound_labels: { customer: 'acme', owner: 'acme' } }])).toEqual({ key: 'customer', guessed: false });
    // A tenant from a certificate binds no label: no evidence either way.
    expect(tenantKeyOf([{ tenant: 'acme' }, { tenant: 'globex', bound_labels: { org: 'globex' } }])).toEqual({ key: 'org', guessed: false });
  });

  it('edits the tenant apart from the other bound labels', () => {
    expect(labelsDraftOf({ customer: 'acme', region: 'eu', tier: 'gold' }, 'customer')).toEqual({ tenant: 'acme', others: 'region=eu, tier=gold' });
    expect(labelsDraftOf(undefined, 'customer')).toEqual({ tenant: '', others: '' });
    // Nothing bound, but the node has a tenant (its certificate's): binding keeps it.
    expect(labelsDraftOf({ region: 'eu' }, 'customer', 'acme')).toEqual({ tenant: 'acme', others: 'region=eu' });
    expect(labelsDraftOf({ customer: 'globex' }, 'customer', 'acme').tenant).toBe('globex');
    expect(labelsRequest({ tenant: ' globex ', others: 'region=eu' }, 'customer')).toEqual({ labels: { customer: 'globex', region: 'eu' }, errors: {} });
    expect(labelsRequest({ tenant: '', others: '' }, 'customer')).toEqual({ labels: {}, errors: {} });
    expect(labelsRequest({ tenant: 'customer=globex', others: '' }, 'customer').errors.tenant).toContain('one value');
    expect(labelsRequest({ tenant: 'acme', others: 'customer=globex' }, 'customer').errors.others).toContain('Tenant field');
    expect(labelsRequest({ tenant: 'acme', others: 'region' }, 'customer').errors.others).toContain('not label=value');
  });

  it('explains what a move does to the history', () => {
    expect(moveText('lab-a', 'acme', 'globex')).toBe('acme keeps what lab-a reported until now; globex sees only what it reports from now. Its agent reconnects under the new labels.');
    expect(moveText('lab-a', '', 'globex')).toContain('had no tenant and stays visible to staff only; globex sees only what it reports from now');
    expect(moveText('lab-a', 'acme', '')).toContain('acme keeps what lab-a reported until now; from now it has no tenant');
    expect(moveText('lab-a', 'acme', 'acme')).toContain('stays with acme: its history is not split');
  });

  it('builds a bootstrap token request and places the collector problems by field', () => {
    expect(bootstrapRequest({ name: ' acme-eu ', labels: 'customer=acme, region=eu', expires: '90d', maxNodes: '20' })).toEqual({
      req: { name: 'acme-eu', labels: { customer: 'acme', region: 'eu' }, expires_in: '90d', max_nodes: 20 },
      errors: {},
    });
    expect(bootstrapRequest({ name: 'acme', labels: 'customer=acme', expires: '', maxNodes: '' }).req).toEqual({ name: 'acme', labels: { customer: 'acme' } });
    const bad = bootstrapRequest({ name: '-x', labels: '', expires: 'soon', maxNodes: '-1' });
    expect(bad.req).toBeUndefined();
    expect(Object.keys(bad.errors).sort()).toEqual(['expires', 'labels', 'maxNodes', 'name']);

    const msg = [
      'invalid labels: they must name the tenant, e.g. customer=acme (the tenant label is --tenant.label "customer")',
      'invalid labels: expiry 400d must be from 1m to 8760h0m0s',
    ].join('\n');
    expect(bootstrapErrors(400, msg)).toEqual({
      labels: 'they must name the tenant, e.g. customer=acme (the tenant label is --tenant.label "customer")',
      expires: 'expiry 400d must be from 1m to 8760h0m0s',
    });
    expect(bootstrapErrors(409, 'create bootstrap token "acme": a live bootstrap token is named "acme"; revoke it first or choose another name').name).toContain('is named "acme"');
    expect(bootstrapErrors(409, 'create bootstrap token "x": too many bootstrap tokens: 1000 live, at most 1000').form).toContain('too many');
  });

  it('tells live bootstrap tokens from dead ones', () => {
    const now = Date.parse('2025-03-04T10:00:00Z');
    expect(bootstrapState({ expires_at: '2025-03-05T00:00:00Z' }, now)).toBe('live');
    expect(bootstrapState({ expires_at: '2025-03-01T00:00:00Z' }, now)).toBe('expired');
    expect(bootstrapState({ expires_at: '2025-03-05T00:00:00Z', revoked_at: '2025-03-02T00:00:00Z' }, now)).toBe('revoked');
  });
});
