// Package request decodes what clients send the ingress, and nothing else: no server, no
// NATS, no Redis (internal/arch holds it to that), so fuzz tests and benchmarks reach the
// decoding directly. A JSON body is decoded strictly (unknown fields, duplicate spellings
// and strings that are not UTF-8 are refused) and every refusal is a problem (internal/httpx)
// naming the field with its whole path: descriptor[0].value, descriptors[1].entries[0].key.
//
// The check body (POST /v1/check, POST /json) is decoded here whole (Check); the submission
// body's own fields, its media types and headers are still decoded in internal/ingress
// (request.go, batch.go's scanner) on this package's shared parts.
//
// # Files
//
//   - request.go: the limits on a request (MaxKeyBytes, …), Entry, Check and its protojson
//     spellings, DecodeJSON and FindFault (the field at fault), ValidateDomain and
//     ValidateEntries
//   - doc.go: this overview
package request
