// SPDX-License-Identifier: Apache-2.0
/// @file data/csv_options.hpp
/// @brief `tutti::data::csv_options`: which columns of a CSV or TSV file to read, and how.
#pragma once

#include <string>

namespace tutti::data {

/// How the user and item columns are read.
enum class id_format : unsigned char {
  automatic,  ///< integers when every id of the column is one, else names
  integers,   ///< integers only; another id is an error at its line and field
  names,      ///< every id is a name, digits included: `007` and `7` are two ids
};

/// Which columns to read and how to read them; columns are chosen by their header name.
struct csv_options {
  std::string user_col = "userId";   ///< header name of the user id column
  std::string item_col = "movieId";  ///< header name of the item id column
  /// Header name of the label column; empty: none, every row a positive (label 1), as a
  /// platform's log of enrolments or clicks holds them.
  std::string label_col = "rating";
  /// Header name of the timestamp column; empty: none; "auto": `timestamp` when present.
  std::string timestamp_col = "";
  char delimiter = 0;                    ///< field separator; 0: '\t' for a `.tsv` file, else ','
  bool implicit = false;                 ///< labels are implicit feedback and must be 0 or 1
  id_format ids = id_format::automatic;  ///< integers, names, or whichever each column holds
};

}  // namespace tutti::data
