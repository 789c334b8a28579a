// eldr.Table: an owned, immutable eldr_table_t plus its info block.
#pragma once

#include <memory>

#include "py_common.hpp"

namespace eldr_py {

class Table {
 public:
  // Takes ownership of `table` (freed even if reading its info fails).
  explicit Table(eldr_table_t* table);

  const eldr_table_t* get() const noexcept { return m_table.get(); }
  const eldr_table_info_t& info() const noexcept { return m_info; }

 private:
  struct Free {
    void operator()(eldr_table_t* table) const noexcept { eldr_table_free(table); }
  };
  std::unique_ptr<eldr_table_t, Free> m_table;
  eldr_table_info_t m_info = ELDR_TABLE_INFO_INIT;
};

}  // namespace eldr_py
