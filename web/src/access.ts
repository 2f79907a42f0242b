// The access API (collector/access: login, whoami, tokens, audit) as its Go
// types encode to JSON. Written by hand because openapi.json does not
// describe these routes yet; when it does, replace these with aliases of the
// generated schemas (as api.ts does) and delete this file's bodies.

/** A role a person or token holds (collector/access/role.go). */
export type Role = 'viewer' | 'operator' | 'admin' | 'customer';

/** How a principal proved who it is (principal.go Via). */
export type Via = 'token' | 'session' | 'proxy' | 'none' | 'cli' | 'system';

/** How the collector recognises people (config.go Mode). */
export type Mode = 'token' | 'proxy' | 'none';

/** A customer's scope: label → value, all of which a node must carry. */
export type Selector = Record<string, string>;

/** principal.go Principal. */
export interface Principal {
  name: string;
  role: Role;
  via: Via;
  selector?: Selector;
  token_id?: number;
  expires_at?: string;
}

/** http.go WhoAmI: GET /whoami, and the answer to POST /login. */
export interface WhoAmI extends Principal {
  mode: Mode;
}

/** token.go Token: a token as listed, never with its secret. */
export interface Token {
  id: number;
  name: string;
  /** The secret's last four characters. */
  hint: string;
  role: Role;
  selector?: Selector;
  created_by: string;
  created_at: string;
  expires_at: string;
  last_used_at: string | null;
  revoked_at?: string;
  revoked_by?: string;
  /** Created under --auth.mode=none by whoever reached the port: void under any other mode. */
  minted_without_auth?: boolean;
  /** void: minted without authentication, and the collector authenticates now. */
  state: 'live' | 'expired' | 'revoked' | 'void';
}

/** GET /tokens. */
export interface TokenList {
  tokens: Token[];
}

/** http.go CreateTokenRequest: POST /tokens. */
export interface CreateTokenRequest {
  name: string;
  role: Role;
  selector?: Selector;
  /** A Go duration (720h) or days (90d); absent is the collector's default. */
  expires_in?: string;
}

/** http.go CreatedToken: the secret, shown this once. */
export interface CreatedToken {
  token: string;
  info: Token;
}

/** audit.go AuditRecord. old and new are whatever JSON the change recorded; null is none. */
export interface AuditRecord {
  id: number;
  at: string;
  actor: string;
  actor_kind: string;
  token_id?: number;
  role: string;
  action: string;
  object_kind: string;
  object_id: string;
  old: unknown;
  new: unknown;
  remote_addr: string;
}

/** GET /audit. */
export interface AuditList {
  entries: AuditRecord[];
}

/** GET /audit's query (http.go HandleAudit); times as Unix milliseconds. */
export interface AuditQuery {
  object_kind?: string;
  object_id?: string;
  since?: number;
  until?: number;
  before?: number;
  limit?: number;
}

/** audit.go MaxAuditLimit. */
export const MAX_AUDIT_LIMIT = 1000;
