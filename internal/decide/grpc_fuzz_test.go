package decide

import (
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/request"
	"github.com/sluice-io/sluice/internal/rules"
)

// FuzzRLSDescriptors feeds arbitrary wire bytes, decoded as a RateLimitRequest, to the
// request-to-descriptor conversion: it never panics, and what it accepts is within every
// limit and passes the envoy proto's own validation rules.
func FuzzRLSDescriptors(f *testing.F) {
	seeds := []*rlsv3.RateLimitRequest{
		{Domain: "rls", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}},
		{Domain: "d", HitsAddend: 7, Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "a", Value: ""}, {Key: "b", Value: "✓"}}, HitsAddend: wrapperspb.UInt64(1 << 40)},
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "x", Value: "y"}}, Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_DAY, UnitMultiplier: wrapperspb.UInt32(2)}},
			{IsNegativeHits: true},
		}},
		// the reproductions: YEAR × 1048576 (500 before) and DAY × 106000
		{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "x", Value: "y"}},
			Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 50, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(1 << 20)}}}},
		{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "x", Value: "y"}},
			Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 4294967295, Unit: typev3.RateLimitUnit_DAY, UnitMultiplier: wrapperspb.UInt32(106000)}}}},
		{},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(wire, &req) != nil {
			return
		}
		descs, p := rlsDescriptors(&req)
		if p != nil {
			if p.Detail == "" || p.Status != 400 {
				t.Fatalf("a refusal without a reason: %+v", p)
			}
			return
		}
		if req.Domain == "" || len(req.Domain) > request.MaxDomainBytes {
			t.Fatalf("accepted domain of %d bytes", len(req.Domain))
		}
		if len(descs) != len(req.Descriptors) || len(descs) == 0 || len(descs) > request.MaxCheckDescriptors {
			t.Fatalf("%d descriptors from %d", len(descs), len(req.Descriptors))
		}
		for i, d := range descs {
			// A descriptor's own hits_addend of 0 checks without counting, as envoy's does
			// (the oracle said "at least 1" until the fuzzer found one: seed 17d028f6b8f32e4f).
			if (d.Hits < 1 && !(d.OwnHits && d.Hits == 0)) || d.Hits > request.MaxHitsAddend {
				t.Fatalf("descriptor %d: hits %d", i, d.Hits)
			}
			if len(d.Entries) == 0 || len(d.Entries) > request.MaxDescriptorEntries {
				t.Fatalf("descriptor %d: %d entries", i, len(d.Entries))
			}
			for _, e := range d.Entries {
				if e.Key == "" || len(e.Key) > request.MaxKeyBytes || len(e.Value) > request.MaxKeyBytes {
					t.Fatalf("descriptor %d: entry %q=%q accepted", i, e.Key, e.Value)
				}
			}
			if o := d.Override; o != nil && (o.Rate.Requests < 1 || o.Rate.Interval <= 0) {
				t.Fatalf("descriptor %d: override %+v", i, o)
			}
			// An accepted override is one the limiter counts (YEAR × 1048576 wrapped
			// around and answered 500) and never outlives a limit override's longest
			// window.
			if o := d.Override; o != nil {
				if o.Rate.Interval > rules.MaxOverrideWindow {
					t.Fatalf("descriptor %d: override window %v", i, o.Rate.Interval)
				}
				if err := (bucket.Limit{Algorithm: bucket.FixedWindow, Rate: o.Rate.Requests, Interval: o.Rate.Interval}).Validate(); err != nil {
					t.Fatalf("descriptor %d: override %+v the limiter refuses: %v", i, o, err)
				}
			}
		}
		if err := req.ValidateAll(); err != nil {
			t.Fatalf("accepted what envoy's proto rules refuse: %v", err)
		}
	})
}
