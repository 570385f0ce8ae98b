package window_test

import (
	"fmt"
	"time"

	"github.com/sluice-io/sluice/internal/window"
)

// A marketing rule may deliver from 08:00 to 21:00 on weekdays, in each user's own zone
// (time_zone: from_message). A message submitted with time_zone Asia/Seoul on Friday at
// 21:30 Seoul time waits for Monday 08:00 there.
func ExampleWindow_NextOpen() {
	days, _ := window.ParseDays([]string{"mon-fri"})
	from, _ := window.ParseClock("08:00")
	to, _ := window.ParseClock("21:00")
	w := window.Window{Set: true, Days: days, From: from, To: to, FromMessage: true}
	seoul, _ := window.LoadZone("Asia/Seoul")
	at := time.Date(2026, 11, 27, 12, 30, 0, 0, time.UTC) // Friday 21:30 in Seoul
	zone := w.Location(seoul)
	fmt.Println(w.Open(at, zone))
	fmt.Println(w.NextOpen(at, zone).In(seoul).Format("Mon 2006-01-02 15:04 MST"))
	// Output:
	// false
	// Mon 2026-11-30 08:00 KST
}
