package rules

import "gopkg.in/yaml.v3"

func (p *fileParser) queue(n *yaml.Node, field string) *Queue {
	m, ok := p.mapping(n, field, queueFields)
	if !ok {
		return nil
	}
	at := resolve(n)
	q := &Queue{}
	if v, has := m["capacity"]; !has {
		p.errorf(at, joinField(field, "capacity"), "required")
	} else if c, ok := p.int64(v, joinField(field, "capacity")); ok {
		if c < 1 {
			p.errorf(v, joinField(field, "capacity"), "must be ≥ 1 (got %d)", c)
		}
		q.Capacity = c
	}
	if v, has := m["outflow"]; !has {
		p.errorf(at, joinField(field, "outflow"), "required")
	} else if rm, ok := p.mapping(v, joinField(field, "outflow"), rateFields); ok {
		q.Outflow, _ = p.rate(rm, joinField(field, "outflow"), resolve(v), false)
	}
	if v, has := m["total_outflow"]; has {
		if rm, ok := p.mapping(v, joinField(field, "total_outflow"), rateFields); ok {
			t, tok := p.rate(rm, joinField(field, "total_outflow"), resolve(v), false)
			if tok && !q.Outflow.Zero() && t.PerSecond() < q.Outflow.PerSecond() {
				p.errorf(v, joinField(field, "total_outflow"),
					"must be ≥ outflow (%.6g/s < %.6g/s): the whole rule cannot drain slower than one key",
					t.PerSecond(), q.Outflow.PerSecond())
			}
			q.TotalOutflow = t
		}
	}
	if v, has := m["max_age"]; has {
		if d, ok := p.duration(v, joinField(field, "max_age")); ok {
			if d <= 0 {
				p.errorf(v, joinField(field, "max_age"), "must be a positive duration (got %s)", d)
			}
			q.MaxAge = d
		}
	}
	if v, has := m["partitions"]; has {
		if c, ok := p.int64(v, joinField(field, "partitions")); ok {
			if c < 1 || c > MaxPartitions {
				p.errorf(v, joinField(field, "partitions"), "must be 1 to %d (got %d)", MaxPartitions, c)
			}
			q.Partitions = int(c)
		}
	}
	if v, has := m["max_bytes"]; has {
		if b, ok := p.byteSize(v, joinField(field, "max_bytes")); ok {
			if b < 1<<20 {
				p.errorf(v, joinField(field, "max_bytes"), "must be at least 1MiB (got %d bytes)", b)
			}
			q.MaxBytes = b
		}
	}
	q.MaxScheduled = q.Capacity // default: as many waiting for their time as waiting in the queue
	if v, has := m["max_scheduled"]; has {
		if c, ok := p.int64(v, joinField(field, "max_scheduled")); ok {
			if c < 0 {
				p.errorf(v, joinField(field, "max_scheduled"), "must be ≥ 0 (got %d; 0 refuses scheduled messages)", c)
			}
			q.MaxScheduled = c
		}
	}
	return q
}
