package admin

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/internal/audit"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/window"
	"github.com/sluice-io/sluice/queue"
)

// Per-key overrides (docs/http-api.md "Per-key overrides"): GET and PATCH
// /v1/admin/queues/{name}/keys/{key}, POST /v1/admin/queues/{name}/keys (bulk).

// MaxBulkKeys is the most lines one bulk request may carry.
const MaxBulkKeys = 100_000

// maxBulkBytes bounds a bulk body: 100,000 lines of a 256-byte key (base64 in JSON at
// worst) and a rate fit well within it.
const maxBulkBytes = 64 << 20

// keyView is GET/PATCH .../keys/{key}'s answer: the key's queue state and its effective
// outflow with where it comes from.
type keyView struct {
	Queue          string  `json:"queue"`
	Key            string  `json:"key"`
	Depth          uint64  `json:"depth"`
	NextDispatchAt *string `json:"next_dispatch_at"`
	// Outflow is the key's effective outflow; OutflowPerSecond the same as a number.
	Outflow          overrides.RateJSON `json:"outflow"`
	OutflowPerSecond float64            `json:"outflow_per_second"`
	Paused           bool               `json:"paused"`
	// Source: "rule", "rule override" or "key override" (+ " until <time>").
	Source string `json:"source"`
	// Window is when the key's deliveries may happen (null: at any time), from
	// WindowSource: "key override" (+ " until <time>") or "rule" (its delivery.window).
	Window       *window.Spec               `json:"window"`
	WindowSource string                     `json:"window_source"`
	Override     *overrides.KeyOverrideJSON `json:"override"` // the key's own override; null: none
}

func (a *Admin) keyRule(w http.ResponseWriter, r *http.Request) (*rules.Rule, string, bool) {
	rule := a.queueRule(w, r)
	if rule == nil {
		return nil, "", false
	}
	key := r.PathValue("key") // already percent-decoded by the mux
	if err := queue.CheckKey(key); err != nil {
		httpx.WriteProblem(w, httpx.BadRequest("key", err.Error()))
		return nil, "", false
	}
	if a.Keys == nil {
		httpx.WriteProblem(w, httpx.Unavailable("", "per-key overrides are not configured on this process", time.Second))
		return nil, "", false
	}
	return rule, key, true
}

// keyView builds the answer for key of rule with its key override ko (has: one is in
// force), read or just written.
func (a *Admin) keyView(r *http.Request, rule *rules.Rule, key string, ko overrides.KeyOverride, has bool) (keyView, error) {
	ctx := r.Context()
	v := keyView{Queue: rule.Name, Key: key}
	depth, err := a.Queues.Depth(ctx, rule.Name, key)
	if err != nil {
		return v, err
	}
	v.Depth = depth
	if next, ok, err := a.nextSlot(ctx, rule.Name, key); err == nil && ok && depth > 0 {
		s := next.UTC().Format(time.RFC3339Nano)
		v.NextDispatchAt = &s
	}
	ro := a.override(ctx, rule.Name)
	v.OutflowPerSecond, v.Paused, v.Source = overrides.EffectiveKey(rule, ro, ko, has)
	eff, _ := overrides.Effective(rule, ro)
	rate := eff.Queue.Outflow
	if has && !ko.Outflow.Zero() {
		rate = ko.Outflow
	}
	v.Outflow = overrides.EncodeRate(rate)
	win, wsrc := overrides.EffectiveWindow(rule, ko, has)
	v.Window, v.WindowSource = window.SpecOf(win), wsrc
	if has {
		ov := ko.View()
		v.Override = &ov
	}
	return v, nil
}

// getKeyOverride answers GET .../keys/{key}: depth and next dispatch as before, and the
// key's effective outflow with its source. The override is read from the store, so a
// write of a moment ago shows even where this process's index has not seen it yet.
func (a *Admin) getKeyOverride(w http.ResponseWriter, r *http.Request) {
	if a.Keys == nil {
		a.getKey(w, r) // no per-key overrides here: depth and next dispatch only
		return
	}
	rule, key, ok := a.keyRule(w, r)
	if !ok {
		return
	}
	ko, has, err := a.Keys.Store().GetKey(r.Context(), rule.Name, key)
	if err != nil {
		has = false
		ko, has = a.Keys.Lookup(rule.Name, key)
	}
	v, err := a.keyView(r, rule, key, ko, has)
	if err != nil {
		httpx.WriteProblem(w, httpx.Unavailable("", err.Error(), time.Second))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}

// patchKey answers PATCH .../keys/{key}: a JSON merge patch of the key's override.
func (a *Admin) patchKey(w http.ResponseWriter, r *http.Request) {
	rule, key, ok := a.keyRule(w, r)
	if !ok {
		return
	}
	body, ok := readPatch(w, r)
	if !ok {
		return
	}
	patch, err := overrides.ParseKeyPatch(body)
	if err != nil {
		writePatchError(w, err)
		return
	}
	ctx := r.Context()
	after, before, err := a.Keys.Store().ApplyKey(ctx, rule, a.override(ctx, rule.Name), key, patch)
	if err != nil {
		writePatchError(w, err)
		return
	}
	action := audit.ActionKeyTune
	if after.IsZero() {
		action = audit.ActionKeyReset
	}
	a.record(r, audit.Record{Action: action, Queue: rule.Name, Target: key,
		Before: keyOverrideAudit(before), After: keyOverrideAudit(after), Result: "ok"})
	v, err := a.keyView(r, rule, key, after, !after.IsZero())
	if err != nil {
		httpx.WriteProblem(w, httpx.Unavailable("", "the override is stored; the key's depth could not be read: "+err.Error(), time.Second))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}

func keyOverrideAudit(o overrides.KeyOverride) map[string]any {
	v := map[string]any{}
	if !o.Outflow.Zero() {
		v["outflow"] = overrides.EncodeRate(o.Outflow)
	}
	if o.Paused {
		v["paused"] = true
	}
	if o.Window != nil {
		v["window"] = window.SpecOf(*o.Window).Text()
	}
	if !o.Until.IsZero() {
		v["until"] = o.Until.UTC().Format(time.RFC3339)
	}
	return v
}

// lineError is one refused line of a bulk request.
type lineError struct {
	Line   int    `json:"line"`
	Key    string `json:"key,omitempty"`
	Field  string `json:"field,omitempty"`
	Detail string `json:"detail"`
}

// bulkProblem is a refused bulk request: problem+json with every bad line.
type bulkProblem struct {
	httpx.Problem
	Errors []lineError `json:"errors"`
}

// bulkResult is a bulk request's answer.
type bulkResult struct {
	Queue   string `json:"queue"`
	Lines   int    `json:"lines"`
	Set     int    `json:"set"`     // keys whose override was written
	Reset   int    `json:"reset"`   // keys whose override was dropped
	Written int    `json:"written"` // set + reset that reached the store
}

// maxLineErrors bounds the errors one answer lists; the count is in the detail.
const maxLineErrors = 100

// bulkKeys answers POST .../keys: NDJSON (one KeyPatch object with a "key" member per
// line) or CSV (key,outflow[,for]). Every line is checked first; when any is refused,
// nothing is written and the answer names each bad line (line number, key, field). A
// line states the key's whole override (no merge with what is stored).
func (a *Admin) bulkKeys(w http.ResponseWriter, r *http.Request) {
	rule := a.queueRule(w, r)
	if rule == nil {
		return
	}
	if a.Keys == nil {
		httpx.WriteProblem(w, httpx.Unavailable("", "per-key overrides are not configured on this process", time.Second))
		return
	}
	format := ""
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		switch {
		case err == nil && mt == "text/csv":
			format = "csv"
		case err == nil && (mt == "application/x-ndjson" || mt == "application/jsonl" || mt == "application/json"):
			format = "ndjson"
		default:
			httpx.WriteProblem(w, httpx.UnsupportedMediaType("Content-Type must be application/x-ndjson or text/csv (got "+strconv.Quote(ct)+")"))
			return
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBulkBytes+1))
	if err != nil {
		httpx.WriteProblem(w, httpx.BadRequest("", "could not read the body"))
		return
	}
	if len(body) > maxBulkBytes {
		httpx.WriteProblem(w, httpx.TooLarge(fmt.Sprintf("a bulk body is at most %d bytes; split the file", maxBulkBytes)))
		return
	}
	if format == "" { // no Content-Type: a first '{' is NDJSON
		format = "csv"
		if t := bytes.TrimLeft(body, " \t\r\n\ufeff"); len(t) > 0 && t[0] == '{' {
			format = "ndjson"
		}
	}
	ctx := r.Context()
	ro := a.override(ctx, rule.Name)
	st := a.Keys.Store()
	now := st.Now()
	var lines []bulkLine
	var errs []lineError
	if format == "csv" {
		lines, errs = parseCSVKeys(body)
	} else {
		lines, errs = parseNDJSONKeys(body)
	}
	if len(lines)+len(errs) > MaxBulkKeys {
		httpx.WriteProblem(w, httpx.TooLarge(fmt.Sprintf("at most %d lines per request (got %d); split the file", MaxBulkKeys, len(lines)+len(errs))))
		return
	}
	if len(lines)+len(errs) == 0 {
		httpx.WriteProblem(w, httpx.BadRequest("", "the body has no lines: send key,outflow[,for] (CSV) or one JSON object per line (NDJSON)"))
		return
	}
	seen := make(map[string]int, len(lines))
	ws := make([]overrides.KeyWrite, 0, len(lines))
	res := bulkResult{Queue: rule.Name, Lines: len(lines) + len(errs)}
	for _, l := range lines {
		if err := queue.CheckKey(l.key); err != nil {
			errs = append(errs, lineError{Line: l.line, Key: l.key, Field: "key", Detail: err.Error()})
			continue
		}
		if first, dup := seen[l.key]; dup {
			errs = append(errs, lineError{Line: l.line, Key: l.key, Field: "key", Detail: fmt.Sprintf("repeats line %d", first)})
			continue
		}
		seen[l.key] = l.line
		o := overrides.KeyOverride{}.MergeKey(l.patch, now)
		if o.IsZero() && !l.patch.Reset {
			// A line states the key's whole override: one that sets nothing would silently
			// delete it. Deleting takes an explicit reset.
			errs = append(errs, lineError{Line: l.line, Key: l.key, Field: "outflow", Detail: "the line sets nothing: give outflow, paused or window (or reset to drop the key's override)"})
			continue
		}
		if err := st.CheckKeyWrite(rule, ro, o); err != nil {
			errs = append(errs, patchLineErrors(l, err)...)
			continue
		}
		if o.IsZero() {
			res.Reset++
		} else {
			res.Set++
		}
		ws = append(ws, overrides.KeyWrite{Key: l.key, Override: o})
	}
	if len(errs) > 0 {
		sortLineErrors(errs)
		p := bulkProblem{Problem: httpx.BadRequest(fmt.Sprintf("line %d: %s", errs[0].Line, errs[0].Field),
			fmt.Sprintf("%d of %d lines refused, nothing written; first: line %d: %s", len(errs), res.Lines, errs[0].Line, errs[0].Detail))}
		if len(errs) > maxLineErrors {
			errs = errs[:maxLineErrors]
		}
		p.Errors = errs
		writeBulkProblem(w, p)
		return
	}
	n, err := st.PutKeys(ctx, rule.Name, ws)
	res.Written = n
	result := "ok"
	if err != nil {
		result = "partial: " + err.Error()
	}
	a.record(r, audit.Record{Action: audit.ActionKeyBulk, Queue: rule.Name,
		After: map[string]any{"lines": res.Lines, "set": res.Set, "reset": res.Reset, "written": n}, Result: result})
	if err != nil {
		httpx.WriteProblem(w, httpx.Unavailable("", fmt.Sprintf("%d of %d lines written, then: %v; send the file again (lines are idempotent)", n, len(ws), err), time.Second))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, res)
}

type bulkLine struct {
	line  int
	key   string
	patch overrides.KeyPatch
}

func patchLineErrors(l bulkLine, err error) []lineError {
	var pes overrides.PatchErrors
	if errors.As(err, &pes) {
		out := make([]lineError, len(pes))
		for i, pe := range pes {
			out[i] = lineError{Line: l.line, Key: l.key, Field: pe.Field, Detail: pe.Message}
		}
		return out
	}
	return []lineError{{Line: l.line, Key: l.key, Detail: strings.TrimPrefix(err.Error(), "overrides: ")}}
}

// parseNDJSONKeys reads one object per line: {"key":"m-42","outflow":"20/s","for":"24h"}.
// Blank lines are skipped but counted, so line numbers match an editor's.
func parseNDJSONKeys(body []byte) ([]bulkLine, []lineError) {
	var lines []bulkLine
	var errs []lineError
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if n == 1 {
			raw = bytes.TrimPrefix(raw, []byte("\ufeff"))
		}
		if len(raw) == 0 {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil || m == nil {
			errs = append(errs, lineError{Line: n, Detail: "must be a JSON object {key, outflow, paused, window, until, for, reset}"})
			continue
		}
		kraw, ok := m["key"]
		var key string
		if !ok || json.Unmarshal(kraw, &key) != nil {
			errs = append(errs, lineError{Line: n, Field: "key", Detail: "required: a string"})
			continue
		}
		delete(m, "key")
		rest, _ := json.Marshal(m)
		p, err := overrides.ParseKeyPatch(rest)
		if err != nil {
			errs = append(errs, patchLineErrors(bulkLine{line: n, key: key}, err)...)
			continue
		}
		lines = append(lines, bulkLine{line: n, key: key, patch: p})
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, lineError{Line: n + 1, Detail: "unreadable: " + err.Error()})
	}
	return lines, errs
}

// parseCSVKeys reads key,outflow[,for[,window]]: outflow is a rate (20/s, 300/m, 10/30s),
// "paused", "reset" (drop the key's override) or empty (a line that sets a window only);
// for is a duration (24h); window is the one-line form `sluice tune --window` takes
// ("mon-fri 09:00-18:00 Europe/Paris"). A first line "key,outflow…" is a header. Quote a
// key that holds a comma.
func parseCSVKeys(body []byte) ([]bulkLine, []lineError) {
	var lines []bulkLine
	var errs []lineError
	cr := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(body, []byte("\ufeff"))))
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	first := true
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			errs = append(errs, lineError{Line: line, Detail: "not CSV: " + err.Error()})
			if len(errs) > maxLineErrors {
				break
			}
			continue
		}
		if first {
			first = false
			if strings.EqualFold(strings.TrimSpace(rec[0]), "key") {
				continue
			}
		}
		if len(rec) < 2 || len(rec) > 4 {
			errs = append(errs, lineError{Line: line, Detail: fmt.Sprintf("want key,outflow[,for[,window]] (got %d fields)", len(rec))})
			continue
		}
		key := rec[0]
		var p overrides.KeyPatch
		if len(rec) == 4 && strings.TrimSpace(rec[3]) != "" {
			var perrs []lineError
			if v := strings.ToLower(strings.TrimSpace(rec[1])); v == "reset" || v == "-" {
				perrs = append(perrs, lineError{Line: line, Key: key, Field: "window", Detail: "a reset line takes no window"})
			} else if w, err := overrides.ParseWindowText(rec[3]); err != nil {
				perrs = patchLineErrors(bulkLine{line: line, key: key}, err)
			} else {
				p.Window = &w
			}
			if len(perrs) > 0 {
				errs = append(errs, perrs...)
				continue
			}
		}
		switch v := strings.TrimSpace(rec[1]); strings.ToLower(v) {
		case "":
			if p.Window == nil {
				errs = append(errs, lineError{Line: line, Key: key, Field: "outflow", Detail: "empty: give a rate, paused or reset (or a window in the fourth column)"})
				continue
			}
		case "paused":
			yes := true
			p.Paused = &yes
		case "reset", "-":
			p.Reset = true
		default:
			rate, err := overrides.ParseRateText(v)
			if err != nil {
				errs = append(errs, lineError{Line: line, Key: key, Field: "outflow", Detail: err.Error()})
				continue
			}
			p.Outflow = &rate
		}
		if len(rec) == 3 && strings.TrimSpace(rec[2]) != "" {
			d, err := time.ParseDuration(strings.TrimSpace(rec[2]))
			if err != nil || d <= 0 {
				errs = append(errs, lineError{Line: line, Key: key, Field: "for", Detail: fmt.Sprintf("must be a duration > 0 like 30m or 24h (got %q)", rec[2])})
				continue
			}
			if p.Reset {
				errs = append(errs, lineError{Line: line, Key: key, Field: "for", Detail: "a reset line takes no duration"})
				continue
			}
			p.For = d
		}
		lines = append(lines, bulkLine{line: line, key: key, patch: p})
	}
	return lines, errs
}

func sortLineErrors(errs []lineError) {
	slices.SortStableFunc(errs, func(a, b lineError) int { return a.Line - b.Line })
}

func writeBulkProblem(w http.ResponseWriter, p bulkProblem) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
