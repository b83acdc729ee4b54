/*
 Licensed to the Apache Software Foundation (ASF) under one
 or more contributor license agreements.  See the NOTICE file
 distributed with this work for additional information
 regarding copyright ownership.  The ASF licenses this file
 to you under the Apache License, Version 2.0 (the
 "License"); you may not use this file except in compliance
 with the License.  You may obtain a copy of the License at

     http://www.apache.org/licenses/LICENSE-2.0

 Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an "AS IS" BASIS,
 WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 See the License for the specific language governing permissions and
 limitations under the License.
*/

// How many attempts, and how long, the two backoffs of the shim really make with
// k8s.io/client-go/util/retry.OnError. Drop into pkg/cache/ and run
//   go test ./pkg/cache/ -run TestBackoffAttempts -count=1 -v

package cache

import (
	"errors"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// attempts runs retry.OnError with an always-failing function and counts the calls.
func attempts(b wait.Backoff) int {
	n := 0
	_ = retry.OnError(b, func(error) bool { return true }, func() error { n++; return errors.New("fail") })
	return n
}

// sleeps lists the delays ExponentialBackoff sleeps between attempts, without sleeping.
func sleeps(b wait.Backoff) []time.Duration {
	var out []time.Duration
	for b.Steps > 1 { // ExponentialBackoff stops after the attempt made with Steps == 1, or once Steps is 0
		out = append(out, b.Step())
		if b.Steps == 0 {
			break
		}
	}
	return out
}

func TestBackoffAttempts(t *testing.T) {
	// master pkg/cache/task.go:46-51 (retryBackoff, the bind and volume-bind retries)
	bind := wait.Backoff{Steps: 8, Duration: time.Second, Factor: 2, Cap: 30 * time.Second}
	// v1.9.0 and master pkg/cache/scheduler_callback.go:68-72 (the AssumePod retries)
	assume := wait.Backoff{Steps: 30, Duration: time.Second, Cap: 30 * time.Second}

	t.Logf("bind:   sleeps %v", sleeps(bind))
	t.Logf("assume: %d sleeps of %v", len(sleeps(assume)), sleeps(assume)[0])
	assert.DeepEqual(t, sleeps(bind), []time.Duration{time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 16 * time.Second})
	assert.Equal(t, len(sleeps(assume)), 29)

	// the same schedules scaled to milliseconds, run for real through retry.OnError
	bindMs := wait.Backoff{Steps: 8, Duration: time.Millisecond, Factor: 2, Cap: 30 * time.Millisecond}
	assumeMs := wait.Backoff{Steps: 30, Duration: time.Millisecond, Cap: 30 * time.Millisecond}
	assert.Equal(t, attempts(bindMs), 5, "bind: attempts")
	assert.Equal(t, attempts(assumeMs), 30, "assume: attempts")
}
