// Client.request and Client.requestJSON: any route of the API, typed by its
// path template from the generated schema (schema.ts), for the calls the
// SDK has no method of its own for (tenants, keys, sidecars, audit...).
// The types only read schema.ts, so a route added to api/openapi.yaml is
// callable, typed, as soon as `npm run generate` has run.
import type { Body, CallOptions } from "./http.js";
import type { paths } from "./schema.js";

/** An HTTP method of the API. */
export type Method = "GET" | "PUT" | "POST" | "PATCH" | "DELETE";

/** The operation that method M of path template P is (never when P has no such method). */
export type Operation<P extends keyof paths, M extends Method> = NonNullable<paths[P][Lowercase<M> & keyof paths[P]]>;

/** The path templates of the API that take method M, such as "/v1/vms/{vm}" for "GET". */
export type PathFor<M extends Method> = {
  [P in keyof paths]: [Operation<P, M>] extends [never] ? never : P;
}[keyof paths];

type ParametersOf<Op, K extends "path" | "query"> = Op extends { parameters: { [Q in K]?: infer X } } ? X : never;

/** The path parameters of an operation, such as { vm: string }; never when it has none. */
export type PathParams<Op> = Exclude<ParametersOf<Op, "path">, undefined>;

/** The query parameters of an operation; never when it has none. */
export type QueryParams<Op> = Exclude<ParametersOf<Op, "query">, undefined>;

/** The JSON request body of an operation; never when it takes none. */
export type JSONBody<Op> = Op extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;

type Success<Op> = Op extends { responses: infer R } ? R[Extract<keyof R, 200 | 201 | 202>] : never;

/** The JSON answer of an operation's success; null when it answers no JSON (204, bytes, a stream). */
export type JSONAnswer<Op> = [Success<Op>] extends [never]
  ? null
  : Success<Op> extends { content: { "application/json": infer A } }
    ? A
    : null;

/** The options of Client.request for operation Op: its parameters and body are typed by the schema. */
export type RequestOptions<Op> = CallOptions & {
  /** Query parameters; arrays repeat the name. */
  query?: [QueryParams<Op>] extends [never] ? never : QueryParams<Op>;
  /** A JSON body; exclusive with body. */
  json?: [JSONBody<Op>] extends [never] ? never : JSONBody<Op>;
  /** A body sent as it is (file contents, archives), with contentType. */
  body?: Body;
  contentType?: string;
  /** The Accept header; application/json unless set. */
  accept?: string;
  headers?: Record<string, string>;
  /** Sent as Idempotency-Key: the gateway runs the call once per key, and the SDK may retry it. */
  idempotencyKey?: string;
} & ([PathParams<Op>] extends [never] ? { params?: never } : { params: PathParams<Op> });

/**
 * The options argument of Client.request: required when the path template
 * has parameters to fill, optional otherwise.
 */
export type RequestArgs<Op> = [PathParams<Op>] extends [never] ? [o?: RequestOptions<Op>] : [o: RequestOptions<Op>];

/**
 * fillPath puts the escaped params into a path template's {name}s. A
 * template's parameter missing from params is a TypeError, so that no
 * request leaves with a literal "{vm}" in it. A path without templates (one
 * a caller built, query and all) comes back as it is.
 */
export function fillPath(template: string, params: Record<string, unknown> | undefined): string {
  return template.replace(/\{([^}/]+)\}/g, (_, name: string) => {
    const v = params?.[name];
    if (v === undefined || v === null) throw new TypeError(`agentos-gateway: ${template} needs the path parameter ${name}`);
    return encodeURIComponent(String(v));
  });
}
