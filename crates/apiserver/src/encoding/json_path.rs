//! The JSONPath subset of CRD printer columns: `.a.b`, `['a.b']`, `[2]`, `[-1]`, `[*]`
//! and `[?(@.type=="Ready")]` (with `==` or `!=` against a quoted string, a number, `true`
//! or `false`), as in `.status.conditions[?(@.type=="Ready")].status`. A path that does not
//! parse selects nothing.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter {
        path: Vec<String>,
        equal: bool,
        value: Value,
    },
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath(Vec<Step>);

impl JsonPath {
    /// Parses `path` (`{}` around it is allowed, as kubectl's templates have them).
    pub fn parse(path: &str) -> Option<JsonPath> {
        let p = path.trim();
        let p = p
            .strip_prefix('{')
            .and_then(|x| x.strip_suffix('}'))
            .unwrap_or(p);
        let p = p.strip_prefix('$').unwrap_or(p);
        let b = p.as_bytes();
        let mut steps = Vec::new();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'.' => {
                    let start = i + 1;
                    let mut j = start;
                    while j < b.len() && b[j] != b'.' && b[j] != b'[' {
                        j += 1;
                    }
                    if j > start {
                        steps.push(Step::Field(p[start..j].to_string()));
                    }
                    i = j;
                }
                b'[' => {
                    let close = find_close(p, i)?;
                    let inner = p[i + 1..close].trim();
                    steps.push(bracket(inner)?);
                    i = close + 1;
                }
                _ => return None,
            }
        }
        Some(JsonPath(steps))
    }

    /// The values the path selects in `v`, in document order.
    pub fn select<'v>(&self, v: &'v Value) -> Vec<&'v Value> {
        let mut cur = vec![v];
        for step in &self.0 {
            let mut next = Vec::new();
            for x in cur {
                match step {
                    Step::Field(f) => next.extend(x.get(f)),
                    Step::Index(n) => {
                        if let Some(a) = x.as_array() {
                            let idx = if *n < 0 { a.len() as i64 + n } else { *n };
                            next.extend(usize::try_from(idx).ok().and_then(|i| a.get(i)));
                        }
                    }
                    Step::All => match x {
                        Value::Array(a) => next.extend(a.iter()),
                        Value::Object(m) => next.extend(m.values()),
                        _ => {}
                    },
                    Step::Filter { path, equal, value } => {
                        if let Some(a) = x.as_array() {
                            for item in a {
                                let got = path.iter().try_fold(item, |v, k| v.get(k));
                                let same = got == Some(value);
                                if same == *equal && (got.is_some() || !*equal) {
                                    next.push(item);
                                }
                            }
                        }
                    }
                }
            }
            cur = next;
        }
        cur
    }
}

fn find_close(p: &str, open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (i, c) in p[open..].char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<&str> {
    let s = s.trim();
    s.strip_prefix('\'')
        .and_then(|x| x.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|x| x.strip_suffix('"')))
}

fn bracket(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::All);
    }
    if let Some(f) = unquote(inner) {
        return Some(Step::Field(f.to_string()));
    }
    if let Ok(n) = inner.parse::<i64>() {
        return Some(Step::Index(n));
    }
    let cond = inner.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (lhs, equal, rhs) = if let Some((l, r)) = cond.split_once("==") {
        (l, true, r)
    } else {
        let (l, r) = cond.split_once("!=")?;
        (l, false, r)
    };
    let path: Vec<String> = lhs
        .trim()
        .strip_prefix("@.")?
        .split('.')
        .map(str::to_string)
        .collect();
    let rhs = rhs.trim();
    let value = match unquote(rhs) {
        Some(s) => Value::String(s.to_string()),
        None => serde_json::from_str(rhs).ok()?,
    };
    Some(Step::Filter { path, equal, value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sel(path: &str, v: &Value) -> Vec<Value> {
        JsonPath::parse(path)
            .unwrap()
            .select(v)
            .into_iter()
            .cloned()
            .collect()
    }

    #[test]
    fn printer_column_paths_select_what_kubectl_would() {
        let v = json!({
            "metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"replicas": 3, "items": [{"n": 1}, {"n": 2}]},
            "status": {"conditions": [
                {"type": "Synced", "status": "False"},
                {"type": "Ready", "status": "True"}
            ]}
        });
        assert_eq!(sel(".spec.replicas", &v), vec![json!(3)]);
        assert_eq!(sel("{.metadata.name}", &v), vec![json!("a")]);
        assert_eq!(
            sel(".metadata.labels['app.kubernetes.io/name']", &v),
            vec![json!("web")]
        );
        assert_eq!(sel(".spec.items[*].n", &v), vec![json!(1), json!(2)]);
        assert_eq!(sel(".spec.items[-1].n", &v), vec![json!(2)]);
        assert_eq!(
            sel(".status.conditions[?(@.type==\"Ready\")].status", &v),
            vec![json!("True")]
        );
        assert_eq!(
            sel(".status.conditions[?(@.type!='Ready')].type", &v),
            vec![json!("Synced")]
        );
        assert!(sel(".spec.missing.deeper", &v).is_empty());
        assert!(JsonPath::parse("spec").is_none());
        assert!(JsonPath::parse(".a[").is_none());
    }
}
