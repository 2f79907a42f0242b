// Tenancy as the UI shows it (collector/tenant, collector/nodeauth): a node's
// tenant is the value of one label key (--tenant.label, default customer),
// bound server-side by the operator; what an agent claims for a bound key is
// ignored. A move to another tenant splits the node's history: what it
// reported before stays its former tenant's.
import { parseLabelList } from './alerts';
import type { BootstrapToken, CreateBootstrapTokenRequest, NodeIdentity, NodeSummary } from './api';

/** The collector's default tenant label (tenant.DefaultKey). */
export const DEFAULT_TENANT_KEY = 'customer';

/** One label the node's agent claimed against what the operator bound. */
export interface Claim {
  key: string;
  claimed: string;
  /** What is bound for the key; null when the key is the operator's but nothing is bound. */
  bound: string | null;
}

/** The agent's ignored claims, by key: from claimed_labels (staff only) against the node's labels. */
export function claimsOf(n: Pick<NodeSummary, 'labels' | 'claimed_labels'> | undefined): Claim[] {
  const claimed = n?.claimed_labels ?? {};
  return Object.keys(claimed)
    .sort()
    .map((key) => ({ key, claimed: claimed[key], bound: n?.labels?.[key] ?? null }));
}

/** "The agent claims customer=globex; the operator bound customer=acme; its claim is ignored." */
export function claimText(c: Claim): string {
  const bound = c.bound === null ? `no ${c.key}` : `${c.key}=${c.bound}`;
  return `The agent claims ${c.key}=${c.claimed}; the operator bound ${bound}; its claim is ignored.`;
}

/** The banner of a node row its tenant lost to another: null while the node is still this tenant's. */
export function retiredText(retiredAt: string | null | undefined, fmt: (iso: string) => string): string | null {
  if (!retiredAt) return null;
  return `This node moved to another tenant on ${fmt(retiredAt)}; what is shown is what it reported before.`;
}

/** 2025-03-04 14:05 (UTC offset as the browser's), for dates that must read as dates. */
export function formatDate(iso: string): string {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return `${d.toLocaleDateString('en-CA')} ${d.toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit' })}`;
}

/** customer=acme, region=eu with keys sorted; '' for none. */
export function labelsText(labels: Record<string, string> | null | undefined, sep = ', '): string {
  return Object.keys(labels ?? {})
    .sort()
    .map((k) => `${k}=${labels![k]}`)
    .join(sep);
}

/**
 * The tenant label key, which the API does not state: the key whose bound
 * value is the tenant on every identity that binds one (customer when it is
 * among them), else the collector's default. guessed says it is the default
 * for want of any evidence.
 */
export function tenantKeyOf(ids: Pick<NodeIdentity, 'tenant' | 'bound_labels'>[]): { key: string; guessed: boolean } {
  const each = ids.filter((id) => id.tenant).map((id) => Object.keys(id.bound_labels ?? {}).filter((k) => id.bound_labels?.[k] === id.tenant))
    .filter((ks) => ks.length > 0); // a tenant from a certificate binds no label
  const keys = each.length ? each.reduce((a, b) => a.filter((k) => b.includes(k))) : [];
  if (keys.length === 0) return { key: DEFAULT_TENANT_KEY, guessed: true };
  if (keys.includes(DEFAULT_TENANT_KEY)) return { key: DEFAULT_TENANT_KEY, guessed: false };
  return { key: [...keys].sort()[0], guessed: false };
}

/** The editor's fields: the tenant, and the other bound labels as k=v, …. */
export interface LabelsDraft {
  tenant: string;
  others: string;
}

/**
 * The editor's fields for what is bound; the tenant field starts from the
 * node's tenant even where none is bound (one its certificate names, or its
 * Hello's where names are not verified), so that binding it keeps it.
 */
export function labelsDraftOf(bound: Record<string, string> | null | undefined, key: string, tenant = ''): LabelsDraft {
  const others = { ...(bound ?? {}) };
  tenant = others[key] ?? tenant;
  delete others[key];
  return { tenant, others: labelsText(others) };
}

export type LabelsErrors = Partial<Record<'tenant' | 'others', string>>;

/** The labels to bind (PUT /nodes/{node}/labels), or what is wrong with the draft; the collector judges keys and values. */
export function labelsRequest(d: LabelsDraft, key: string): { labels?: Record<string, string>; errors: LabelsErrors } {
  const errors: LabelsErrors = {};
  const tenant = d.tenant.trim();
  if (/[,=\s]/.test(tenant)) errors.tenant = `The tenant is one value, e.g. acme: the label ${key}=acme.`;
  const others = parseLabelList(d.others, 'Other labels');
  if (typeof others === 'string') errors.others = others;
  else if (key in others) errors.others = `Set ${key} in the Tenant field, not among the other labels.`;
  if (Object.keys(errors).length) return { errors };
  const labels: Record<string, string> = { ...(others as Record<string, string>) };
  if (tenant) labels[key] = tenant;
  return { labels, errors };
}

/** Whether binding labels changes anything. */
export function sameLabels(a: Record<string, string> | null | undefined, b: Record<string, string> | null | undefined): boolean {
  return labelsText(a) === labelsText(b);
}

/**
 * What binding these labels does to the node's history, for the admin to
 * confirm: a new tenant starts a new history, and the old one keeps what the
 * node reported until now.
 */
export function moveText(node: string, from: string, to: string): string {
  if (from === to) return `${node} stays ${to ? `with ${to}` : 'without a tenant'}: its history is not split; only its bound labels change.`;
  const before = from ? `${from} keeps what ${node} reported until now` : `what ${node} reported until now had no tenant and stays visible to staff only`;
  const after = to ? `${to} sees only what it reports from now` : `from now it has no tenant, so only staff see what it reports`;
  return `${before}; ${after}. Its agent reconnects under the new labels.`;
}

/** A tenant bootstrap token's state as the list shows it. */
export function bootstrapState(t: Pick<BootstrapToken, 'revoked_at' | 'expires_at'>, now = Date.now()): 'live' | 'expired' | 'revoked' {
  if (t.revoked_at) return 'revoked';
  return new Date(t.expires_at).getTime() <= now ? 'expired' : 'live';
}

export interface BootstrapDraft {
  name: string;
  /** k=v, …; must name the tenant. */
  labels: string;
  /** 30d, 720h; empty for the collector's default (30d). */
  expires: string;
  /** Most names it may enroll; empty for the collector's default (1000). */
  maxNodes: string;
}

export const emptyBootstrapDraft = (): BootstrapDraft => ({ name: '', labels: '', expires: '', maxNodes: '' });

export type BootstrapErrors = Partial<Record<keyof BootstrapDraft | 'form', string>>;

/** The request for a draft, or what is wrong with it (the collector checks the rest and says which field). */
export function bootstrapRequest(d: BootstrapDraft): { req?: CreateBootstrapTokenRequest; errors: BootstrapErrors } {
  const errors: BootstrapErrors = {};
  const name = d.name.trim();
  if (!name) errors.name = 'Name the token after the tenant and rollout, e.g. acme-eu.';
  else if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(name)) errors.name = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit.";
  const labels = parseLabelList(d.labels, 'Labels');
  if (typeof labels === 'string') errors.labels = labels;
  else if (Object.keys(labels).length === 0) errors.labels = 'The labels every node it enrolls gets, naming the tenant, e.g. customer=acme.';
  const exp = d.expires.trim();
  if (exp && !(/^[1-9][0-9]*d$/.test(exp) || /^([0-9]+(\.[0-9]+)?(h|m|s))+$/.test(exp))) errors.expires = 'Give the lifetime in days (30d) or hours (720h).';
  const max = d.maxNodes.trim();
  const maxN = Number(max);
  if (max && (!/^[0-9]+$/.test(max) || !Number.isSafeInteger(maxN))) errors.maxNodes = 'A whole number of nodes, or empty for the default (1000).';
  if (Object.keys(errors).length) return { errors };
  const req: CreateBootstrapTokenRequest = { name, labels: labels as Record<string, string> };
  if (exp) req.expires_in = exp;
  if (max && maxN > 0) req.max_nodes = maxN;
  return { req, errors };
}

/** The collector's 400 (problems joined by new lines) or 409, each part by the field it is about. */
export function bootstrapErrors(status: number, message: string): BootstrapErrors {
  const out: BootstrapErrors = {};
  for (const raw of message.split('\n')) {
    const part = raw.replace(/^(invalid labels|invalid|conflict):\s*/i, '').trim();
    if (!part) continue;
    const p = part.toLowerCase();
    const f: keyof BootstrapErrors =
      /bootstrap token name|live bootstrap token is named/.test(p) ? 'name' : /^expir|expires_in/.test(p) ? 'expires' : /max nodes/.test(p) ? 'maxNodes' : /label|tenant|selector/.test(p) && status !== 409 ? 'labels' : 'form';
    out[f] = out[f] ? `${out[f]} ${part}` : part;
  }
  return out;
}
