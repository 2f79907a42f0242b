import { useEffect } from 'preact/hooks';
import type { AuditRecord } from '../access';
import { MAX_AUDIT_LIMIT } from '../access';
import { api } from '../api';
import { AUDIT_KINDS, SINCE_CHOICES, auditFiltersFrom, auditQuery, diffValues } from '../audit';
import { formatAgo, formatTime } from '../format';
import { useNow, usePoll } from '../hooks';
import { auditHref, linkClick, navigate, withParams } from '../route';
import { Empty, ErrorBox, Loading, StaleNotice, TableWrap } from './common';

export const AUDIT_REFRESH_MS = 15_000;
/** Lines of a change shown in the table; the full values are one click away. */
const MAX_LINES = 12;

const KIND_TEXT: Record<string, string> = { threshold: 'threshold', alert_rule: 'alert rule', token: 'token', node: 'node' };

/** Old → new as the lines that differ, and both values in full on request. */
export function AuditChange({ e }: { e: AuditRecord }) {
  const { changes, unchanged } = diffValues(e.old, e.new);
  const shown = changes.slice(0, MAX_LINES);
  const json = (v: unknown) => (v === null || v === undefined ? '—' : JSON.stringify(v, null, 2));
  return (
    <div class="audit-change">
      {changes.length === 0 ? (
        <span class="muted">{e.old == null && e.new == null ? 'no value recorded' : 'no difference'}</span>
      ) : (
        <ul class="diff">
          {shown.map((c) => (
            <li key={`${c.kind}:${c.path}`} class={`diff-${c.kind}`}>
              {c.path && <code class="diff-path">{c.path}</code>}
              {c.path && ': '}
              {c.kind !== 'added' && (
                <del class="diff-old">
                  <span class="sr-only">{c.kind === 'removed' ? 'removed ' : 'was '}</span>
                  {c.old}
                </del>
              )}
              {c.kind === 'changed' && (
                <span class="diff-arrow" aria-hidden="true">
                  {' → '}
                </span>
              )}
              {c.kind !== 'removed' && (
                <ins class="diff-new">
                  <span class="sr-only">{c.kind === 'added' ? 'set to ' : ', now '}</span>
                  {c.new}
                </ins>
              )}
            </li>
          ))}
          {changes.length > shown.length && <li class="muted">…and {changes.length - shown.length} more</li>}
        </ul>
      )}
      {(e.old != null || e.new != null) && (
        <details class="audit-full">
          <summary>
            Full values{unchanged > 0 && <span class="muted"> ({unchanged} unchanged)</span>}
          </summary>
          <div class="audit-json">
            <div>
              <div class="audit-json-h">Before</div>
              <pre>{json(e.old)}</pre>
            </div>
            <div>
              <div class="audit-json-h">After</div>
              <pre>{json(e.new)}</pre>
            </div>
          </div>
        </details>
      )}
    </div>
  );
}

function AuditRow({ e, now, params }: { e: AuditRecord; now: number; params: URLSearchParams }) {
  return (
    <tr class={`audit-row act-${e.action}`} data-audit-id={e.id} data-kind={e.object_kind} data-object-id={e.object_id} data-action={e.action}>
      <td class="nowrap">
        <time dateTime={e.at} title={e.at}>
          {formatTime(e.at, new Date(now))}
        </time>
        <div class="muted small">{formatAgo(e.at, now)}</div>
      </td>
      <td>
        <span class="audit-actor">{e.actor}</span> {e.role && <span class="tag">{e.role}</span>}
        <div class="muted small" title={e.remote_addr ? `from ${e.remote_addr}` : undefined}>
          {e.actor_kind}
          {e.remote_addr ? ` · ${e.remote_addr}` : ''}
        </div>
      </td>
      <td class="nowrap audit-action">{e.action}</td>
      <td>
        <a href={auditHref(withParams(params, { kind: e.object_kind, id: null, limit: null }))} onClick={linkClick} title={`Only ${e.object_kind} entries`}>
          {KIND_TEXT[e.object_kind] ?? e.object_kind}
        </a>
        {e.object_id && (
          <div>
            <a
              class="mono break small"
              href={auditHref(withParams(params, { kind: e.object_kind, id: e.object_id, limit: null }))}
              onClick={linkClick}
              title={`The history of this ${KIND_TEXT[e.object_kind] ?? e.object_kind}`}
            >
              {e.object_id}
            </a>
          </div>
        )}
      </td>
      <td class="audit-change-cell">
        <AuditChange e={e} />
      </td>
    </tr>
  );
}

/** Who changed what and when: newest first, filters in the URL. */
export function AuditPage({ params }: { params: URLSearchParams }) {
  const f = auditFiltersFrom(params);
  const now = useNow(15_000);
  const polled = usePoll(`audit:${f.kind}:${f.id}:${f.since}:${f.limit}`, (s) => api.audit(auditQuery(f, Date.now()), s), AUDIT_REFRESH_MS);
  const entries = polled.data ?? [];

  useEffect(() => {
    document.title = 'Audit log · NBS';
  }, []);

  const update = (changes: Record<string, string | null>) => navigate(auditHref(withParams(params, changes)), { replace: true });
  const kinds = [...new Set([...AUDIT_KINDS, ...entries.map((e) => e.object_kind), f.kind])].filter(Boolean);
  const sinces = SINCE_CHOICES.some(([v]) => v === f.since) ? SINCE_CHOICES : [...SINCE_CHOICES, [f.since, f.since] as [string, string]];
  const filtered = f.kind !== '' || f.id !== '' || f.since !== '';

  return (
    <div class="page audit-page">
      <div class="page-head">
        <h1>Audit log</h1>
        <span class="muted updated">newest first · refreshed every {AUDIT_REFRESH_MS / 1000}s</span>
      </div>
      <p class="muted small page-intro">Every change to thresholds, alert rules, tokens and nodes: who made it, with which role, and the value before and after.</p>

      <div class="toolbar" role="search" aria-label="Filter the audit log">
        <label class="field-inline">
          <span>Object</span>
          <select aria-label="Object" value={f.kind} onChange={(e) => update({ kind: (e.currentTarget as HTMLSelectElement).value || null, id: null, limit: null })}>
            <option value="">any</option>
            {kinds.map((k) => (
              <option key={k} value={k}>
                {KIND_TEXT[k] ?? k}
              </option>
            ))}
          </select>
        </label>
        <label class="field-inline">
          <span>Since</span>
          <select aria-label="Since" value={f.since} onChange={(e) => update({ since: (e.currentTarget as HTMLSelectElement).value || null, limit: null })}>
            {sinces.map(([v, label]) => (
              <option key={v} value={v}>
                {label}
              </option>
            ))}
          </select>
        </label>
        {f.id && (
          <span class="tag">
            id {f.id}{' '}
            <button type="button" class="btn btn-sm btn-quiet" onClick={() => update({ id: null, limit: null })} aria-label={`Show every ${KIND_TEXT[f.kind] ?? 'object'}, not only ${f.id}`}>
              ×
            </button>
          </span>
        )}
        {filtered && (
          <button type="button" class="btn btn-sm btn-quiet" onClick={() => update({ kind: null, id: null, since: null, limit: null })}>
            Clear filters
          </button>
        )}
      </div>

      {polled.data && <StaleNotice error={polled.error} />}
      {polled.loading && !polled.error && <Loading what="the audit log" />}
      {!polled.data && polled.error && <ErrorBox title="Cannot load the audit log" error={polled.error} onRetry={polled.refresh} />}
      {polled.data && entries.length === 0 && <Empty>{filtered ? 'No change matches these filters.' : 'Nothing has been changed yet.'}</Empty>}
      {entries.length > 0 && (
        <TableWrap page label="Audit log table">
          <table class="audit-table">
            <caption class="sr-only">Audit log, newest first</caption>
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Who</th>
                <th scope="col">Action</th>
                <th scope="col">Object</th>
                <th scope="col">Change (before → after)</th>
              </tr>
            </thead>
            <tbody>
              {entries.map((e) => (
                <AuditRow key={e.id} e={e} now={now} params={params} />
              ))}
            </tbody>
          </table>
        </TableWrap>
      )}
      {polled.data && entries.length === f.limit && f.limit < MAX_AUDIT_LIMIT && (
        <p>
          <button type="button" class="btn btn-sm" onClick={() => update({ limit: String(Math.min(f.limit * 2, MAX_AUDIT_LIMIT)) })}>
            Show older entries
          </button>
        </p>
      )}
    </div>
  );
}
