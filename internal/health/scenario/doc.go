// Package scenario runs the executable eligibility scenarios kept beside it in
// testdata/scenarios: each file declares instances, timestamped evidence and the answers
// expected at given instants, and Answers replays it through a fresh health.Engine, ticking
// it as a registry would. 'meshflows eligibility run FILE' runs one from the command line.
package scenario
