// Package apijson writes the JSON of the API's types directly, byte for byte what
// httpapi.Marshal writes for them (no HTML escaping), without encoding/json's reflection: the
// forms written per request, per record or per entry on the registry's hot paths — the
// catalog, the records a replica writes to etcd, and the pieces of discovery answers and
// heartbeat answers. Whatever only encoding/json writes correctly (a string that needs
// escaping, a time outside years 0–9999, a manifest) goes through it, so the bytes are the
// same either way; the fuzz targets hold each writer to encoding/json's bytes.
package apijson
