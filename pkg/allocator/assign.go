package allocator

// This file holds an exact rectangular assignment solver (the Hungarian
// method with potentials, O(rows² × cols)) over lexicographic cost vectors,
// and the canonical choice among its optimal answers.

// cost is a cost vector. Vectors add component-wise and compare
// lexicographically, which makes them an ordered abelian group: the
// Hungarian method needs nothing else, so it minimises the first
// component, then the second, and so on, exactly. Components stay far below
// overflow (see maxAlign).
type cost [5]int64

func (a cost) add(b cost) cost {
	for i := range a {
		a[i] += b[i]
	}
	return a
}

func (a cost) sub(b cost) cost {
	for i := range a {
		a[i] -= b[i]
	}
	return a
}

func (a cost) less(b cost) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// never is more than any cost a problem can reach.
var never = cost{1 << 60}

// assignment is a solved problem: rows 0..n-1 matched to distinct columns
// 0..m-1 (n <= m) at minimum total cost, with the dual potentials that prove
// it.
type assignment struct {
	n, m int
	c    []cost // c[i*m+j]
	u, v []cost // row and column potentials: u[i]+v[j] <= c(i,j), v[j] <= 0
	col  []int  // row -> column
}

// solve runs the Hungarian method (shortest augmenting paths with
// potentials; the classic e-maxx formulation, 1-based inside). Every row is
// matched; a column is matched or not.
func solve(n, m int, c []cost) *assignment {
	u := make([]cost, n+1)
	v := make([]cost, m+1)
	p := make([]int, m+1) // column -> row (1-based, 0 = free)
	way := make([]int, m+1)
	minv := make([]cost, m+1)
	used := make([]bool, m+1)
	for i := 1; i <= n; i++ {
		p[0] = i
		j0 := 0
		for j := range minv {
			minv[j], used[j] = never, false
		}
		for {
			used[j0] = true
			i0, delta, j1 := p[j0], never, 0
			row := c[(i0-1)*m:]
			for j := 1; j <= m; j++ {
				if used[j] {
					continue
				}
				if cur := row[j-1].sub(u[i0]).sub(v[j]); cur.less(minv[j]) {
					minv[j], way[j] = cur, j0
				}
				if minv[j].less(delta) {
					delta, j1 = minv[j], j
				}
			}
			for j := 0; j <= m; j++ {
				if used[j] {
					u[p[j]] = u[p[j]].add(delta)
					v[j] = v[j].sub(delta)
				} else {
					minv[j] = minv[j].sub(delta)
				}
			}
			j0 = j1
			if p[j0] == 0 {
				break
			}
		}
		for j0 != 0 {
			j1 := way[j0]
			p[j0] = p[j1]
			j0 = j1
		}
	}
	a := &assignment{n: n, m: m, c: c, u: u[1:], v: v[1:], col: make([]int, n)}
	for j := 1; j <= m; j++ {
		if p[j] != 0 {
			a.col[p[j]-1] = j - 1
		}
	}
	return a
}

// canonical replaces a.col by one optimal assignment chosen without regard
// to how the solver got there: first the column set that, listed in
// ascending order, is lexicographically smallest, then, row by row in
// order, the smallest column that row can take.
//
// By LP duality an assignment is optimal exactly when it uses only tight
// edges (u[i]+v[j] == c(i,j)) and matches every column with v[j] < 0 (the
// potentials of solve satisfy these for its own answer, and any optimal
// dual certifies every optimal primal). So the optimal assignments are the
// row-perfect matchings of the tight graph that cover the required
// columns. Both passes keep such a matching and move it along alternating
// paths of tight edges; the symmetric difference with any other such
// matching shows that when no path exists, no optimal assignment has the
// property sought.
func (a *assignment) canonical() {
	n, m := a.n, a.m
	tight := make([]bool, n*m)
	for i := range n {
		for j := range m {
			tight[i*m+j] = a.u[i].add(a.v[j]) == a.c[i*m+j]
		}
	}
	owner := make([]int, m) // column -> row, -1 when free
	for j := range owner {
		owner[j] = -1
	}
	for i, j := range a.col {
		owner[j] = i
	}
	move := func(r, j int) {
		if owner[a.col[r]] == r { // else a row moved in already
			owner[a.col[r]] = -1
		}
		owner[j], a.col[r] = r, j
	}

	// Pass 1: columns in order join the set when some optimal assignment
	// holds them together with those that joined before. in[j] marks the
	// columns decided in (and the required ones); the matching always
	// covers them.
	in := make([]bool, m)
	var zero cost
	for j := range m {
		in[j] = a.v[j].less(zero)
	}
	seen := make([]int, m)
	stamp := 0
	// free finds a row that can move into column j such that the column it
	// leaves is either not in the set or refilled the same way, and moves
	// the rows along that path.
	var free func(j int) bool
	free = func(j int) bool {
		for r := range n {
			c := a.col[r]
			if !tight[r*m+j] || seen[c] == stamp {
				continue
			}
			seen[c] = stamp
			if !in[c] || free(c) {
				move(r, j)
				return true
			}
		}
		return false
	}
	for j := range m {
		if in[j] {
			continue
		}
		if owner[j] >= 0 {
			in[j] = true
			continue
		}
		stamp++
		seen[j] = stamp
		in[j] = free(j)
	}
	// Now the matched columns are exactly the set. Pass 2: row i takes the
	// smallest column it can while rows before it keep theirs. Row i can
	// take column j (matched to row r > i) when r can move on, along tight
	// edges of rows after i, to the column i leaves.
	next := make([]int, n) // row -> the column it would move to
	reach := make([]bool, n)
	for i := range n {
		c := a.col[i]
		for r := range n {
			reach[r] = false
		}
		queue := []int{}
		for r := i + 1; r < n; r++ {
			if tight[r*m+c] {
				reach[r], next[r] = true, c
				queue = append(queue, r)
			}
		}
		for len(queue) > 0 {
			q := queue[0]
			queue = queue[1:]
			for r := i + 1; r < n; r++ {
				if !reach[r] && tight[r*m+a.col[q]] {
					reach[r], next[r] = true, a.col[q]
					queue = append(queue, r)
				}
			}
		}
		for j := range m {
			if j == c {
				break
			}
			if r := owner[j]; r > i && tight[i*m+j] && reach[r] {
				// Shift the chain: i takes j, r takes next[r], and so on
				// until a row takes c.
				var chain []int
				for x := r; ; x = owner[next[x]] {
					chain = append(chain, x)
					if next[x] == c {
						break
					}
				}
				targets := make([]int, len(chain))
				for k, x := range chain {
					targets[k] = next[x]
				}
				a.col[i], owner[j] = j, i
				for k, x := range chain {
					a.col[x], owner[targets[k]] = targets[k], x
				}
				break
			}
		}
	}
}

// total is the cost of the current assignment.
func (a *assignment) total() cost {
	var t cost
	for i, j := range a.col {
		t = t.add(a.c[i*a.m+j])
	}
	return t
}
