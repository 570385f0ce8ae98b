package rules

import "strings"

// SignKeyFiles returns the sink's SignKeys as a list (nil when empty).
func (s Sink) SignKeyFiles() []string {
	if s.SignKeys == "" {
		return nil
	}
	return strings.Split(s.SignKeys, ",")
}
