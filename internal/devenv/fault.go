package devenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault makes the demo sink fail a share of the deliveries it selects, so that retries,
// dead letters and a sink that pushes back can be tried on a laptop (`sluice dev
// -sink-fail`, or POST /_demo/fail on the demo sink while it runs).
//
// A fault selects deliveries by Path (the request's path; "/orders" also selects
// "/sink/orders", the path the example rules use), by Rule (the Sluice-Rule header) and by
// Key (Sluice-Key); an empty selector selects everything. Of the deliveries it selects it
// fails Share (0 < Share ≤ 1) — evenly spread, not at random: with share 0.3 exactly 3 of
// every 10 fail — answering Status, with a Retry-After of RetryAfter when set, after
// waiting Delay (a Delay longer than the rule's sink timeout is a timeout).
type Fault struct {
	Path       string        `json:"path,omitempty"`
	Rule       string        `json:"rule,omitempty"`
	Key        string        `json:"key,omitempty"`
	Status     int           `json:"status"`
	Share      float64       `json:"share"`
	RetryAfter time.Duration `json:"-"`
	Delay      time.Duration `json:"-"`
}

// faultJSON is Fault as /_demo/fail reads and writes it: durations as "2s".
type faultJSON struct {
	Path       string  `json:"path,omitempty"`
	Rule       string  `json:"rule,omitempty"`
	Key        string  `json:"key,omitempty"`
	Status     int     `json:"status"`
	Share      float64 `json:"share"`
	RetryAfter string  `json:"retry_after,omitempty"`
	Delay      string  `json:"delay,omitempty"`
}

func (f Fault) json() faultJSON {
	j := faultJSON{Path: f.Path, Rule: f.Rule, Key: f.Key, Status: f.Status, Share: f.Share}
	if f.RetryAfter > 0 {
		j.RetryAfter = f.RetryAfter.String()
	}
	if f.Delay > 0 {
		j.Delay = f.Delay.String()
	}
	return j
}

// String writes f as ParseFaults reads it.
func (f Fault) String() string {
	var b []string
	for _, kv := range [][2]string{{"path", f.Path}, {"rule", f.Rule}, {"key", f.Key}} {
		if kv[1] != "" {
			b = append(b, kv[0]+"="+kv[1])
		}
	}
	b = append(b, "status="+strconv.Itoa(f.Status), "share="+strconv.FormatFloat(f.Share, 'g', -1, 64))
	if f.RetryAfter > 0 {
		b = append(b, "retry_after="+f.RetryAfter.String())
	}
	if f.Delay > 0 {
		b = append(b, "delay="+f.Delay.String())
	}
	return strings.Join(b, ",")
}

// selector is what two faults must share to be the same fault (a later one replaces it).
func (f Fault) selector() string { return f.Path + "\x00" + f.Rule + "\x00" + f.Key }

func (f Fault) validate() error {
	switch {
	case f.Status < 100 || f.Status > 599:
		return fmt.Errorf("status=%d: want an HTTP status, 100 to 599 (503, 429, 500, 422…)", f.Status)
	case math.IsNaN(f.Share) || f.Share < 0 || f.Share > 1:
		return fmt.Errorf("share=%v: want 0 to 1 (0.3 fails 3 deliveries of 10; 0 removes the fault)", f.Share)
	case f.Path != "" && !strings.HasPrefix(f.Path, "/"):
		return fmt.Errorf("path=%s: want a path beginning with /", f.Path)
	case f.RetryAfter < 0 || f.Delay < 0:
		return errors.New("retry_after and delay: want positive durations")
	}
	return nil
}

// ParseFaults reads faults written as `path=/orders,status=503,share=0.3`, several
// separated by ";". Fields: path, rule, key (selectors; none selects every delivery),
// status (required), share (default 1), retry_after and delay (durations). "" is none.
func ParseFaults(s string) ([]Fault, error) {
	var out []Fault
	for _, spec := range strings.Split(s, ";") {
		if strings.TrimSpace(spec) == "" {
			continue
		}
		f, err := ParseFault(spec)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// ParseFault reads one fault (see ParseFaults).
func ParseFault(spec string) (Fault, error) {
	f := Fault{Share: 1}
	for _, field := range strings.Split(spec, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		name, value, ok := strings.Cut(field, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok {
			return Fault{}, fmt.Errorf("fault %q: %q is not name=value", spec, field)
		}
		var err error
		switch name {
		case "path":
			f.Path = value
		case "rule":
			f.Rule = value
		case "key":
			f.Key = value
		case "status":
			f.Status, err = strconv.Atoi(value)
		case "share":
			f.Share, err = strconv.ParseFloat(strings.TrimSuffix(value, "%"), 64)
			if err == nil && strings.HasSuffix(value, "%") {
				f.Share /= 100
			}
		case "retry_after":
			f.RetryAfter, err = parseSeconds(value)
		case "delay":
			f.Delay, err = parseSeconds(value)
		default:
			return Fault{}, fmt.Errorf("fault %q: unknown field %q; want path, rule, key, status, share, retry_after, delay", spec, name)
		}
		if err != nil {
			return Fault{}, fmt.Errorf("fault %q: %s=%s: %v", spec, name, value, err)
		}
	}
	if err := f.validate(); err != nil {
		return Fault{}, fmt.Errorf("fault %q: %v", spec, err)
	}
	return f, nil
}

// parseSeconds reads "2s", "500ms", or a bare number of seconds ("2", as Retry-After is).
func parseSeconds(v string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	return time.ParseDuration(v)
}

// faults are the demo sink's faults, changed at run time by /_demo/fail.
type faults struct {
	mu   sync.Mutex
	list []*activeFault
}

type activeFault struct {
	Fault
	debt      float64 // the share owed: a delivery fails when it reaches 1 (even spread)
	selected  int64
	failedCnt int64
}

// set adds f, or replaces the fault with f's selectors; a share of 0 removes it.
func (fs *faults) set(f Fault) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, a := range fs.list {
		if a.selector() == f.selector() {
			if f.Share == 0 {
				fs.list = append(fs.list[:i], fs.list[i+1:]...)
			} else {
				fs.list[i] = &activeFault{Fault: f}
			}
			return
		}
	}
	if f.Share > 0 {
		fs.list = append(fs.list, &activeFault{Fault: f})
	}
}

func (fs *faults) clear() {
	fs.mu.Lock()
	fs.list = nil
	fs.mu.Unlock()
}

// decide returns the fault that fails this delivery, if any: the first fault (in the
// order set) that selects it, when its share is due.
func (fs *faults) decide(path, rule, key string) (Fault, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, a := range fs.list {
		if !a.selects(path, rule, key) {
			continue
		}
		a.selected++
		a.debt += a.Share
		if a.debt >= 1-1e-9 {
			a.debt--
			a.failedCnt++
			return a.Fault, true
		}
		return Fault{}, false // the first fault that selects it decides
	}
	return Fault{}, false
}

func (f Fault) selects(path, rule, key string) bool {
	if f.Path != "" && path != f.Path && path != "/sink"+f.Path {
		return false
	}
	if f.Rule != "" && rule != f.Rule {
		return false
	}
	return f.Key == "" || key == f.Key
}

// faultState is one fault as GET /_demo/fail lists it, with what it has done.
type faultState struct {
	faultJSON
	Selected int64 `json:"selected"`
	Failed   int64 `json:"failed"`
}

func (fs *faults) states() []faultState {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := []faultState{}
	for _, a := range fs.list {
		out = append(out, faultState{faultJSON: a.json(), Selected: a.selected, Failed: a.failedCnt})
	}
	return out
}

// serveFail is /_demo/fail: GET lists the faults, POST sets one (a JSON object, or the
// flag's text form: path=/orders,status=503,share=0.3), DELETE removes them all.
func (s *Sink) serveFail(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodDelete:
		s.faults.clear()
		s.log.Info("demo sink: faults cleared")
	case http.MethodPost:
		f, err := readFault(r)
		if err != nil {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": "Bad fault", "status": 400, "detail": err.Error()})
			return
		}
		s.faults.set(f)
		s.log.Info("demo sink: fault set", "fault", f.String())
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "GET, POST or DELETE", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"faults": s.faults.states()})
}

func readFault(r *http.Request) (Fault, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return Fault{}, fmt.Errorf("fault: reading the body: %v", err)
	}
	text := strings.TrimSpace(string(body))
	if q := r.URL.Query(); text == "" && len(q) > 0 { // POST /_demo/fail?rule=orders&status=503
		var fields []string
		for name, values := range q {
			for _, v := range values {
				fields = append(fields, name+"="+v)
			}
		}
		text = strings.Join(fields, ",")
	}
	if !strings.HasPrefix(text, "{") {
		return ParseFault(text)
	}
	var j faultJSON
	j.Share = 1
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return Fault{}, fmt.Errorf("fault: %v", err)
	}
	f := Fault{Path: j.Path, Rule: j.Rule, Key: j.Key, Status: j.Status, Share: j.Share}
	if j.RetryAfter != "" {
		if f.RetryAfter, err = parseSeconds(j.RetryAfter); err != nil {
			return Fault{}, fmt.Errorf("fault: retry_after: %v", err)
		}
	}
	if j.Delay != "" {
		if f.Delay, err = parseSeconds(j.Delay); err != nil {
			return Fault{}, fmt.Errorf("fault: delay: %v", err)
		}
	}
	if err := f.validate(); err != nil {
		return Fault{}, fmt.Errorf("fault: %v", err)
	}
	return f, nil
}
