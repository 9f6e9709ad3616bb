// The few node:crypto functions the webhook module uses, declared here so
// that the SDK needs no @types/node: its browser entry never loads them.
declare module "node:crypto" {
  interface Hmac {
    update(data: string | Uint8Array): Hmac;
    digest(): Uint8Array;
  }
  export function createHmac(algorithm: string, key: string | Uint8Array): Hmac;
  export function timingSafeEqual(a: Uint8Array, b: Uint8Array): boolean;
}
