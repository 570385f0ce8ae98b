package queue_test

import (
	"fmt"

	"github.com/sluice-io/sluice/queue"
)

// Keys are data: any UTF-8 key becomes one subject token that NATS cannot read as syntax.
func ExampleKeyToken() {
	for _, key := range []string{"m-42", "a.b", ">", ""} {
		fmt.Printf("%q → %s\n", key, queue.KeyToken(key))
	}
	// Output:
	// "m-42" → kbS00Mg
	// "a.b" → kYS5i
	// ">" → kPg
	// "" → k
}
