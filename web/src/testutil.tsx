// Helpers for component tests (happy-dom): mount, wait, and a fake collector API.
import { type VNode, render } from 'preact';
import { act } from 'preact/test-utils';
import { afterEach, vi } from 'vitest';
import type { Role, WhoAmI } from './access';
import { SessionContext, sessionFor } from './auth';

let mounted: HTMLElement[] = [];

export function mount(v: VNode): HTMLElement {
  const el = document.createElement('div');
  document.body.appendChild(el);
  act(() => render(v, el));
  mounted.push(el);
  return el;
}

/** Who a test is signed in as: a token session of role, customers scoped to customer=acme. */
export function whoami(role: Role, extra: Partial<WhoAmI> = {}): WhoAmI {
  return { name: `${role}-1`, role, via: 'session', mode: 'token', token_id: 1, ...(role === 'customer' ? { selector: { customer: 'acme' } } : {}), ...extra };
}

/** Mounts v inside a session of role, as App provides one. */
export function mountAs(role: Role, v: VNode, logout: () => void = () => {}): HTMLElement {
  return mount(<SessionContext.Provider value={sessionFor(whoami(role), logout)}>{v}</SessionContext.Provider>);
}

/** Mounts page inside a session of role at path (the address too), with path's query as its params. */
export function mountAt(role: Role, path: string, page: (params: URLSearchParams) => VNode): HTMLElement {
  history.replaceState(null, '', path);
  return mountAs(role, page(new URLSearchParams(location.search)));
}

afterEach(() => {
  mounted.forEach((el) => {
    render(null, el);
    el.remove();
  });
  mounted = [];
  vi.unstubAllGlobals();
  vi.useRealTimers();
});

/** Polls cond (after letting promises and renders settle) until it does not throw. */
export async function waitFor<T>(cond: () => T, timeoutMs = 2000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    await act(async () => {
      await new Promise((r) => setTimeout(r, 5));
    });
    try {
      return cond();
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw last;
  }
}

/** The first element below root that sel matches; throws where there is none. */
export const $ = (root: ParentNode, sel: string) => {
  const el = root.querySelector(sel);
  if (!el) throw new Error(`no ${sel}`);
  return el as HTMLElement;
};

/** Every element below root that sel matches. */
export const $$ = (root: ParentNode, sel: string) => [...root.querySelectorAll(sel)] as HTMLElement[];

const hasTextOf = (text: string | RegExp) => (e: Element) => (typeof text === 'string' ? e.textContent?.trim() === text : text.test(e.textContent ?? ''));

/** The first element sel matches whose text is text (trimmed) or matches it; throws where there is none. */
export const byText = (root: ParentNode, sel: string, text: string | RegExp) => {
  const el = $$(root, sel).find(hasTextOf(text));
  if (!el) throw new Error(`no ${sel} with text ${text}`);
  return el;
};

/** Whether some element sel matches has that text (as byText). */
export const hasText = (root: ParentNode, sel: string, text: string | RegExp) => $$(root, sel).some(hasTextOf(text));

/** Stubs the clipboard: the returned mock is its writeText. */
export function stubClipboard() {
  const writeText = vi.fn(async (_text: string) => {});
  vi.stubGlobal('navigator', { ...navigator, clipboard: { writeText } });
  return writeText;
}

type Handler = (url: URL, init: RequestInit | undefined) => [number, unknown] | Promise<[number, unknown]>;

/** Stubs fetch: the first route whose "METHOD /path" prefix matches answers. */
export function fakeApi(routes: Record<string, Handler>) {
  const calls: { method: string; url: URL; body?: unknown }[] = [];
  const fn = vi.fn(async (input: RequestInfo | URL, init?: RequestInit) => {
    const url = new URL(String(input), 'http://nbs.test');
    const method = (init?.method ?? 'GET').toUpperCase();
    calls.push({ method, url, body: init?.body ? JSON.parse(String(init.body)) : undefined });
    for (const [k, h] of Object.entries(routes)) {
      const [m, p] = k.split(' ');
      if (m === method && url.pathname === p) {
        const [status, body] = await h(url, init);
        return new Response(body === undefined ? null : JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });
      }
    }
    return new Response(JSON.stringify({ error: { code: 'not_found', message: `no API route ${method} ${url.pathname}: not found` } }), { status: 404 });
  });
  vi.stubGlobal('fetch', fn);
  return calls;
}

export function press(el: Element, key: string) {
  act(() => {
    el.dispatchEvent(new KeyboardEvent('keydown', { key, bubbles: true, cancelable: true }));
  });
}

export function click(el: Element) {
  act(() => {
    (el as HTMLElement).click();
  });
}

export function type(el: HTMLInputElement | HTMLSelectElement, value: string) {
  act(() => {
    el.value = value;
    el.dispatchEvent(new Event(el.tagName === 'SELECT' ? 'change' : 'input', { bubbles: true }));
  });
}
