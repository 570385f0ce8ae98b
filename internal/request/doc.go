// Package request decodes what clients send the ingress, and nothing else: no server, no
// NATS, no Redis (internal/arch holds it to that), so fuzz tests and benchmarks reach the
// decoding directly. A JSON body is decoded strictly (unknown fields, duplicate spellings
// and strings that are not UTF-8 are refused) and every refusal is a problem (internal/httpx)
// naming the field with its whole path: descriptor[0].value, descriptors[1].entries[0].key.
//
// The check body (POST /v1/check, POST /json) is decoded here whole (Check), and so is the
// submission body of POST /v1/messages (Submit): its media type, one submission or a batch
// (a JSON array or NDJSON) into validated requests, each problem naming its field
// (descriptor, headers.X-Tenant, Content-Type; internal/submit prefixes a batch item's
// index: [2].descriptor). internal/submit admits what this package decoded.
//
// # Files
//
//   - request.go: the limits on a request (MaxKeyBytes, …), Entry, Check and its protojson
//     spellings, DecodeJSON and FindFault (the field at fault), ValidateDomain and
//     ValidateEntries
//   - submit.go: Submit (the body of POST /v1/messages), its media types (SubmitMediaType),
//     DecodeSubmit, Validate and the limits of a submission's headers (CheckHeaders), the
//     Prefer: return=representation preference (PrefersDepth), the idempotency Digest
//   - batch.go: batch bodies (IsBatch, SplitBatch, DecodeBatch) and the scanner that decodes
//     plain submissions without encoding/json's reflection (ScanOne, scanArray)
//   - doc.go: this overview
package request
